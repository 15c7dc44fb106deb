// --time-passes reports the wall time of each pass, in pipeline order, then the verifier and the
// total, as mlir-opt's execution time report (on stderr; the IR still goes to stdout).
// RUN: lezero-opt %s -p canonicalize,cse,dce --time-passes 2>&1 >/dev/null | filecheck %s
// RUN: lezero-opt %s -p canonicalize,cse,dce --time-passes --no-verify-each 2>&1 >/dev/null | filecheck %s --check-prefix=NOVERIFY
// RUN: lezero-opt %s -p canonicalize,cse,dce --time-passes 2>/dev/null | filecheck %s --check-prefix=IR

// CHECK:      ===-------------------------------------------------------------------------===
// CHECK-NEXT:                          ... Execution time report ...
// CHECK-NEXT: ===-------------------------------------------------------------------------===
// CHECK-NEXT:   Total Execution Time: {{[0-9]+\.[0-9][0-9][0-9][0-9]}} seconds
// CHECK-EMPTY:
// CHECK-NEXT:   ----Wall Time----  ----Name----
// CHECK-NEXT:   {{ *[0-9]+\.[0-9][0-9][0-9][0-9] \( *[0-9]+\.[0-9]%\)}}  canonicalize
// CHECK-NEXT:   {{ *[0-9]+\.[0-9][0-9][0-9][0-9] \( *[0-9]+\.[0-9]%\)}}  cse
// CHECK-NEXT:   {{ *[0-9]+\.[0-9][0-9][0-9][0-9] \( *[0-9]+\.[0-9]%\)}}  dce
// CHECK-NEXT:   {{ *[0-9]+\.[0-9][0-9][0-9][0-9] \( *[0-9]+\.[0-9]%\)}}  (A) verifier
// CHECK-NEXT:   {{ *[0-9]+\.[0-9][0-9][0-9][0-9] \(100\.0%\)}}  Total
// CHECK-NOT: {{.}}

// NOVERIFY: ----Wall Time----  ----Name----
// NOVERIFY-NEXT: canonicalize
// NOVERIFY-NEXT: cse
// NOVERIFY-NEXT: dce
// NOVERIFY-NEXT: (100.0%)  Total

// IR-NOT: Execution time report
// IR: func.func @f
// IR-NEXT: "lz.exp"
// IR-NEXT: func.return

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.neg"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
