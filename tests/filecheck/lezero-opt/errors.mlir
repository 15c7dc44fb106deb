// Errors are reported as compilers do, with exit status 1 and no Python traceback.
//
// An unknown pass: the message names it, suggests the closest pass, and points at it.
// RUN: not lezero-opt %s -p canonicalise 2>&1 | filecheck %s --check-prefix=ERR --strict-whitespace
// ERR:      lezero-opt: error: unknown pass 'canonicalise'; did you mean 'canonicalize'?
// ERR-NEXT: {{^}}  canonicalise{{$}}
// ERR-NEXT: {{^}}  ^{{$}}
// ERR-NOT: Traceback
//
// RUN: not lezero-opt %s -p 'cse,canonicalize,decompse' 2>&1 | filecheck %s --check-prefix=ERR2 --strict-whitespace
// ERR2:      lezero-opt: error: unknown pass 'decompse'; did you mean 'decompose'?
// ERR2-NEXT: {{^}}  cse,canonicalize,decompse{{$}}
// ERR2-NEXT: {{^}}                   ^{{$}}
//
// An unknown option of a known pass.
// RUN: not lezero-opt %s -p 'constant-fold{max-element=4}' 2>&1 | filecheck %s --check-prefix=OPT
// OPT: lezero-opt: error: unknown option 'max-element' for pass 'constant-fold'; did you mean 'max-elements'?
//
// The verifier rejects what was parsed (before any pass runs): file:line:col, the source line,
// a caret under the op; and no IR on stdout.
// RUN: not lezero-opt %s 2>/dev/null | filecheck %s --check-prefix=NOIR --allow-empty
// NOIR-NOT: {{.}}
// RUN: not lezero-opt %s 2>&1 | filecheck %s --check-prefix=VERIFY --strict-whitespace
// RUN: not lezero-opt %s -p canonicalize 2>&1 | filecheck %s --check-prefix=VERIFY --strict-whitespace
// VERIFY:      {{^}}{{.*}}errors.mlir:[[# @LINE + 5]]:3: error: 'lz.add' op operand shapes 2x3 and 4x3 are not broadcast-compatible
// VERIFY-NEXT: {{^}}  %0 = "lz.add"(%a, %b) : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>{{$}}
// VERIFY-NEXT: {{^}}  ^{{$}}
// VERIFY-NOT: {{.}}
func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %0 = "lz.add"(%a, %b) : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
