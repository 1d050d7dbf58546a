; Kernel discovery for CUDA (tree-sitter-cuda 0.21). Loaded by server/src/syntax/queries.rs.
; Patterns are told apart by capture name, not by order.
;
; @kernel: a `__global__` function definition (any position: top level, namespace,
;          `extern "C"` in both forms, inside `template <...>`).
; @device: a `__device__` function definition (also `__host__ __device__`), a kernel-unit
;          callee candidate.
; @declarator: the definition's declarator; the name is found below it in code, through
;          pointer/reference declarators, qualified names and template specialisations.
; @body: the compound statement searched for calls (grammars/cuda/calls.scm).

(function_definition
  "__global__"
  declarator: (_) @declarator
  body: (compound_statement) @body) @kernel

(function_definition
  "__device__"
  declarator: (_) @declarator
  body: (compound_statement) @body) @device
