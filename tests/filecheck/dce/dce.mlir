// dce: pure ops whose results are unused go (whole chains in one run), used ones and ops of
// unknown effect stay; private functions nothing refers to go, public ones stay.
// RUN: lezero-opt %s -p dce --allow-unregistered-dialect | filecheck %s
// RUN: lezero-opt %s -p dce --allow-unregistered-dialect | filecheck %s --check-prefix=GONE

// CHECK-LABEL: func.func @dead_chain
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @dead_chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[E:.+]] = "lz.exp"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %[[R:.+]] = "lz.relu"(%[[E]]) : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: func.return %[[R]] : tensor<4xf32>
  %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  // dead: %1 -> %2 -> %3, and the constant only %2 reads
  %c = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.mul"(%1, %c) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = "lz.reduce_sum"(%2) {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  %4 = "lz.relu"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %4 : tensor<4xf32>
}

// An op with no known effects is kept though unused, and so is what it reads.
// CHECK-LABEL: func.func @unknown_effects_kept
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @unknown_effects_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[N:.+]] = "lz.neg"(%[[X]])
  // CHECK-NEXT: "test.print"(%[[N]])
  // CHECK-NEXT: func.return %[[X]]
  %0 = "lz.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "test.print"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %x : tensor<4xf32>
}

// Dead ops inside a region go; the op holding the region stays while its result is used, and
// goes (with everything in it) when it is pure and unused.
// CHECK-LABEL: func.func @regions
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
func.func @regions(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %[[K:.+]] = "lz.kernel"(%[[X]]) ({
  // CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<4xf32>):
  // CHECK-NEXT:   %[[R:.+]] = "lz.relu"(%[[A]])
  // CHECK-NEXT:   "lz.yield"(%[[R]])
  // CHECK-NEXT: })
  // CHECK-NEXT: func.return %[[K]]
  %0 = "lz.kernel"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %1 = "lz.relu"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "lz.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "lz.neg"(%2) : (tensor<4xf32>) -> tensor<4xf32>
    "lz.yield"(%1) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "lz.kernel"(%x) ({
  ^bb0(%b: tensor<4xf32>):
    %5 = "lz.tanh"(%b) : (tensor<4xf32>) -> tensor<4xf32>
    "lz.yield"(%5) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// Functions. @unused_public is kept (public: callers may be elsewhere); @used_private is
// called from a public function, @used_by_private only from @used_private: both stay.
// @dead_private, and @dead_callee (only @dead_private calls it), and @recursive (only itself) go.

// CHECK-LABEL: func.func @unused_public
// CHECK-NEXT: func.return
func.func @unused_public(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// CHECK-LABEL: func.func @caller
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4xf32>)
// CHECK-NEXT: %[[C:.+]] = "func.call"(%[[X]]) {callee = @used_private} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: func.return %[[C]]
func.func @caller(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "func.call"(%x) {callee = @used_private} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @used_private
// CHECK-NEXT: "func.call"(%{{.*}}) {callee = @used_by_private}
func.func private @used_private(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "func.call"(%x) {callee = @used_by_private} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @used_by_private
func.func private @used_by_private(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

// CHECK-NOT: @dead_private
// CHECK-NOT: @dead_callee
// CHECK-NOT: @recursive
// GONE-NOT: @dead_private
// GONE-NOT: @dead_callee
// GONE-NOT: @recursive
func.func private @dead_private(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "func.call"(%x) {callee = @dead_callee} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

func.func private @dead_callee(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}

func.func private @recursive(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "func.call"(%x) {callee = @recursive} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// A private function called from inside a region of a public one is used.
// CHECK-LABEL: func.func @calls_from_region
// CHECK: "func.call"(%{{.*}}) {callee = @called_in_region}
func.func @calls_from_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "test.region"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    %1 = "func.call"(%a) {callee = @called_in_region} : (tensor<4xf32>) -> tensor<4xf32>
    "test.yield"(%1) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @called_in_region
func.func private @called_in_region(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
// CHECK-NOT: func.func
