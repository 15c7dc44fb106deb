// --list-passes lists every registered pass with its summary, and its options with their types
// and defaults; it needs no input.  Passes are in alphabetical order (others may come between
// these; the options of each pass follow it directly).
// RUN: lezero-opt --list-passes | filecheck %s

// CHECK:      Available passes:
// CHECK:        canonicalize {{ +}}Simplify local algebra
// CHECK-NEXT:       max-iterations: int = 10  rounds of the greedy driver
// CHECK:        constant-fold {{ +}}Evaluate ops whose operands are all constants
// CHECK-NEXT:       max-elements: int = 1048576  largest result (in elements) to fold
// CHECK:        cse {{ +}}Merge pure ops with the same name, operands, attributes and result types
// CHECK:        dce {{ +}}Erase pure ops whose results are unused, and unreferenced private functions
// CHECK:        decompose {{ +}}Replace composite ops
// CHECK-NEXT:       ops: list[str] = (none)  only these ops
// CHECK:        shape-infer {{ +}}Refine dynamic (?) dims
