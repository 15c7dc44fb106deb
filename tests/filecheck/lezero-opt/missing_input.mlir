// An input file that does not exist (or is a directory) is one clean line and exit status 1.
// RUN: not lezero-opt %t.does-not-exist.mlir 2>&1 | filecheck %s
// RUN: not lezero-opt %t.does-not-exist.mlir -p canonicalize,cse 2>&1 | filecheck %s
// RUN: mkdir -p %t.dir && not lezero-opt %t.dir 2>&1 | filecheck %s --check-prefix=DIR

// CHECK:      {{^}}lezero-opt: error: cannot read '{{.*}}.does-not-exist.mlir': No such file or directory{{$}}
// CHECK-NOT: {{.}}

// DIR:      {{^}}lezero-opt: error: cannot read '{{.*}}.dir': Is a directory{{$}}
// DIR-NOT: {{.}}
