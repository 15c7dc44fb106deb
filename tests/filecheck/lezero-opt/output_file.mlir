// -o writes the result to a file (and nothing to stdout); the file is replaced, not appended to.
// RUN: rm -f %t && lezero-opt %s -p canonicalize -o %t > %t.stdout && filecheck %s < %t
// RUN: filecheck %s --check-prefix=EMPTY --allow-empty < %t.stdout
// RUN: lezero-opt %s -o %t && lezero-opt %s -o %t && filecheck %s --check-prefix=ONCE < %t
// RUN: lezero-opt %s --emit=dot -o %t.dot && filecheck %s --check-prefix=DOT < %t.dot
// Overwriting keeps the file's mode; a symlink is written through (it stays a link); what is not
// a regular file is written to directly (here stdout, through a link in the temp dir, so that a
// regression replaces only the link).
// RUN: chmod 640 %t && lezero-opt %s -p canonicalize -o %t && stat -c %%a %t | filecheck %s --check-prefix=MODE
// RUN: rm -f %t.link && ln -s %t %t.link && lezero-opt %s -o %t.link && test -L %t.link && filecheck %s --check-prefix=LINK < %t
// RUN: rm -f %t.out && ln -s /dev/stdout %t.out && lezero-opt %s -p canonicalize -o %t.out | filecheck %s

// CHECK:      module {
// CHECK-NEXT:   func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:     %0 = "lz.relu"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:     func.return %0 : tensor<4xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }
// CHECK-NOT: {{.}}

// EMPTY-NOT: {{.}}

// ONCE-COUNT-1: func.func @f
// ONCE-NOT: func.func @f

// MODE: 640

// LINK-COUNT-3: "lz.relu"
// LINK-NOT: "lz.relu"

// DOT: digraph "f" {
// DOT: op3 [shape=doubleoctagon, label="return"];

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "lz.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.relu"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
