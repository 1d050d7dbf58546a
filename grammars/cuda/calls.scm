; Calls inside one function body (CUDA), run over the body's byte range only.
; @callee: the called expression; code takes the last name of `a::b<T>` forms and
; ignores member calls (`obj.f()`) and anything that is not a plain function name.

(call_expression
  function: (_) @callee)
