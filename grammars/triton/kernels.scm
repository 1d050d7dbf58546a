; Kernel discovery for Triton (tree-sitter-python 0.25). Loaded by server/src/syntax/queries.rs.
;
; @definition: a decorated function; code keeps it when one decorator is `triton.jit`
;              (or `jit` imported from triton), with or without call arguments. Or a
;              plain function, kept when the file makes it a kernel with a call
;              (`f = triton.jit(f)`, `triton.heuristics(...)(triton.jit(f))`).
; Code runs the query at each statement-level definition only (start depth 0).
; @name, @params, @body: the function's name, parameter list and body block.

(decorated_definition
  definition: (function_definition
    name: (identifier) @name
    parameters: (parameters) @params
    body: (block) @body)) @definition

(function_definition
  name: (identifier) @name
  parameters: (parameters) @params
  body: (block) @body) @definition
