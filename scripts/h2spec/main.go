// Command h2spec: a small main over the h2spec library packages of ../shared/h2spec, whose
// snapshot has no cmd/h2spec. Flags: -h host, -p port, -t (TLS), -k (insecure), -o timeout
// seconds, -j JUnit report, -S strict.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/summerwind/h2spec"
	"github.com/summerwind/h2spec/config"
)

func main() {
	host := flag.String("h", "127.0.0.1", "target host")
	port := flag.Int("p", 0, "target port")
	useTLS := flag.Bool("t", false, "connect over TLS (ALPN h2)")
	insecure := flag.Bool("k", false, "do not verify the server certificate")
	timeout := flag.Int("o", 2, "seconds to wait for each answer")
	junit := flag.String("j", "", "JUnit report path")
	strict := flag.Bool("S", false, "strict mode")
	flag.Parse()
	if *port == 0 {
		fmt.Fprintln(os.Stderr, "h2spec: -p PORT is required")
		os.Exit(2)
	}
	c := &config.Config{
		Host:         *host,
		Port:         *port,
		Path:         "/",
		Timeout:      time.Duration(*timeout) * time.Second,
		MaxHeaderLen: 4000,
		JUnitReport:  *junit,
		Strict:       *strict,
		TLS:          *useTLS,
		Insecure:     *insecure,
		Sections:     flag.Args(),
	}
	ok, err := h2spec.Run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2spec:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
