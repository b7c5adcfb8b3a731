// The etcd server, built from the Go module proxy into the project's tools/bin/etcd by
// reference/store/install_etcd.sh. `go install go.etcd.io/etcd/server/v3@VERSION` cannot
// build it (the module has replace directives), so this module imports etcd's main
// package and calls it; go.mod pins the version and go.sum every dependency.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
