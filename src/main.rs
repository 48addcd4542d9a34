//! The `switchyard` binary: parse flags, set up logging, hand over to the library.

use std::process::ExitCode;

use clap::error::ErrorKind;
use switchyard::config::{self, Config, LogFormat};

// jemalloc instead of glibc malloc: with background purging it gives freed pages back to the OS
// (glibc kept the peak of the first table build as RSS: 218 MiB against 123 MiB at 10,000
// Services, benches/scale.py), builds the table faster, and its statistics back
// `switchyard_heap_allocated_bytes`.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args = match config::parse_args() {
        Ok(args) => args,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, as users of a load balancer expect from a bad flag.
            eprintln!("switchyard: {} (see --help)", config::error_line(&e));
            return ExitCode::from(2);
        }
    };
    let config = match Config::from_args(args).and_then(|c| c.check_sources().map(|()| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("switchyard: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(config.log_format);
    // Pingora and kube both build rustls configs; with one process-wide provider installed up
    // front, no library can pick a second one and panic.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match switchyard::app::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {}", switchyard::app::error_line(&e));
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::field::MakeExt;
    // kube's client and watcher log each failed request themselves (an ERROR per connection
    // failure, a 403's whole Status twice); switchyard's watch says it once per outage with the
    // cause, so theirs are off unless RUST_LOG asks for them. Pingora's server logs a line per
    // service it starts (about fifteen per start, "Starting service: BG ..."): warnings only.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new("info,kube_client=off,kube_runtime=off,pingora_core::server=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // The event's fields at the top level, beside timestamp and level, as log pipelines
        // index them (they were nested under "fields").
        // (`app::JsonLine`: no `log.*` fields of Pingora's records.)
        LogFormat::Json => builder
            .with_ansi(false)
            .event_format(switchyard::app::JsonLine)
            .init(),
        LogFormat::Text => {
            // Colour codes only for a person at a terminal, and never against NO_COLOR
            // (no-color.org: any non-empty value).
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            let ansi = std::io::stderr().is_terminal() && !no_color;
            let fields = tracing_subscriber::fmt::format::debug_fn(switchyard::app::logfmt_field)
                .delimited(" ");
            builder.fmt_fields(fields).with_ansi(ansi).init()
        }
    }
}
