// Package franz_go pins the franz-go release whose own integration tests
// tests/test_franz_go_suite.py runs against weir: `go test -c` of
// github.com/twmb/franz-go/pkg/kgo (and pkg/kadm) with this module's go.mod and go.sum, so the
// test binary is built from exactly these versions, checked against go.sum.
package franz_go

import (
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
