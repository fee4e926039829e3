//go:build !cgo

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "abi/engine is libxrnic.so: build it with cgo, go build -buildmode=c-shared (make abi)")
	os.Exit(2)
}
