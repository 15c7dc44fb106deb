// --print-ir-after-all dumps the module after every pass, --print-ir-after-change only after the
// passes that changed it; the dumps go to stderr, before the final IR on stdout.
// RUN: lezero-opt %s -p canonicalize,cse,dce --print-ir-after-all 2>&1 | filecheck %s --check-prefix=ALL
// RUN: lezero-opt %s -p canonicalize,cse,dce --print-ir-after-change 2>&1 | filecheck %s --check-prefix=CHANGE
// RUN: lezero-opt %s -p canonicalize,cse,dce --print-ir-after-all 2>/dev/null | filecheck %s --check-prefix=STDOUT

// ALL: // -----// IR Dump After Canonicalize (canonicalize) //----- //
// ALL-NEXT: module {
// ALL-NEXT:   func.func @f(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// ALL-NEXT:     %0 = "lz.exp"(%arg0)
// ALL-NEXT:     %1 = "lz.exp"(%arg0)
// ALL-NEXT:     func.return %0, %1
// ALL-NEXT:   }
// ALL-NEXT: }
// ALL: // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// ALL-NEXT: module {
// ALL-NEXT:   func.func @f(%arg0: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
// ALL-NEXT:     %0 = "lz.exp"(%arg0)
// ALL-NEXT:     func.return %0, %0
// ALL-NEXT:   }
// ALL-NEXT: }
// dce changes nothing here, but after-all still dumps it
// ALL: // -----// IR Dump After DeadCodeElimination (dce) //----- //
// ALL-NEXT: module {
// ALL-NEXT:   func.func @f
// ALL-NEXT:     %0 = "lz.exp"(%arg0)
// ALL-NEXT:     func.return %0, %0
// ALL-NEXT:   }
// ALL-NEXT: }
// then the result itself
// ALL-NEXT: module {
// ALL-NEXT:   func.func @f
// ALL-NEXT:     %0 = "lz.exp"(%arg0)
// ALL-NEXT:     func.return %0, %0
// ALL-NEXT:   }
// ALL-NEXT: }
// ALL-NOT: IR Dump

// CHANGE: // -----// IR Dump After Canonicalize (canonicalize) //----- //
// CHANGE-NEXT: module {
// CHANGE-NEXT:   func.func @f
// CHANGE-NEXT:     %0 = "lz.exp"(%arg0)
// CHANGE-NEXT:     %1 = "lz.exp"(%arg0)
// CHANGE-NEXT:     func.return %0, %1
// CHANGE-NEXT:   }
// CHANGE-NEXT: }
// CHANGE-NEXT: // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// CHANGE-NEXT: module {
// CHANGE-NEXT:   func.func @f
// CHANGE-NEXT:     %0 = "lz.exp"(%arg0)
// CHANGE-NEXT:     func.return %0, %0
// CHANGE-NEXT:   }
// CHANGE-NEXT: }
// CHANGE-NOT: IR Dump After DeadCodeElimination
// CHANGE-NEXT: module {
// CHANGE-NOT: IR Dump

// STDOUT-NOT: IR Dump
// STDOUT: module {
// STDOUT-NEXT:   func.func @f
// STDOUT-NEXT:     %0 = "lz.exp"(%arg0)
// STDOUT-NEXT:     func.return %0, %0
// STDOUT-NOT: IR Dump

func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "lz.mul"(%0, %one) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %2 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1, %2 : tensor<4xf32>, tensor<4xf32>
}
