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
        LogFormat::Json => builder.json().flatten_event(true).with_ansi(false).init(),
        LogFormat::Text => {
            // Colour codes only for a person at a terminal, and never against NO_COLOR
            // (no-color.org: any non-empty value).
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            let ansi = std::io::stderr().is_terminal() && !no_color;
            let fields = tracing_subscriber::fmt::format::debug_fn(logfmt_field).delimited(" ");
            builder.fmt_fields(fields).with_ansi(ansi).init()
        }
    }
}

/// One field of a text log line, as logfmt parsers read it: the message bare, every other
/// value quoted when it holds a space, a quote, an `=` or nothing (`object=Ingress shop/web`
/// split into two fields before). The `log.*` fields of records from the `log` crate (Pingora's)
/// are their metadata, already in the line's target.
fn logfmt_field(
    w: &mut tracing_subscriber::fmt::format::Writer<'_>,
    field: &tracing::field::Field,
    value: &dyn std::fmt::Debug,
) -> std::fmt::Result {
    let name = field.name();
    if name.starts_with("log.") {
        return Ok(());
    }
    let text = format!("{value:?}");
    if name == "message" {
        return w.write_str(&text);
    }
    let name = name.strip_prefix("r#").unwrap_or(name);
    write!(w, "{name}={}", logfmt_value(&text))
}

/// `text` as a logfmt value: as is when a parser reads it whole (a bare word, or already a
/// quoted string as `Debug` writes a `&str`), else quoted with `"` and `\` escaped.
fn logfmt_value(text: &str) -> std::borrow::Cow<'_, str> {
    let quoted = text.len() >= 2 && text.starts_with('"') && text.ends_with('"');
    let bare = !text.is_empty()
        && !text
            .chars()
            .any(|c| c == ' ' || c == '"' || c == '=' || c == '\\' || c.is_control());
    if quoted || bare {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::logfmt_value;

    #[test]
    fn logfmt_values_with_spaces_are_quoted() {
        assert_eq!(
            logfmt_value("Ingress shop/rewrite"),
            "\"Ingress shop/rewrite\""
        );
        assert_eq!(logfmt_value("shop/rewrite"), "shop/rewrite");
        assert_eq!(logfmt_value("\"already quoted\""), "\"already quoted\"");
        assert_eq!(logfmt_value(""), "\"\"");
        assert_eq!(logfmt_value("a=b"), "\"a=b\"");
        assert_eq!(logfmt_value("say \"hi\" \\"), "\"say \\\"hi\\\" \\\\\"");
        assert_eq!(logfmt_value("two\nlines"), "\"two\\nlines\"");
    }
}
