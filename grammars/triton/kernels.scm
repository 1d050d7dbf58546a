; Kernel discovery for Triton (tree-sitter-python 0.25). Loaded by server/src/syntax/queries.rs.
;
; @definition: a decorated function; code keeps it when one decorator is `triton.jit`
;              (or `jit` imported from triton), with or without call arguments.
; @name, @params, @body: the function's name, parameter list and body block.

(decorated_definition
  definition: (function_definition
    name: (identifier) @name
    parameters: (parameters) @params
    body: (block) @body)) @definition
