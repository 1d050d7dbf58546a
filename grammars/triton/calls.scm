; Calls inside one jit function body (Triton), run over the body's byte range only.
; @callee: a call by plain name, the form in which one jit function calls another.

(call
  function: (identifier) @callee)
