-- Headless Neovim drives kernel-lsp as a user would: open a kernel file with a spec
-- mistake, read the diagnostics, list symbols, hover the kernel, fix the mistake by
-- editing the buffer, and see the diagnostic go away. Results go to $KERNEL_LSP_OUT
-- as JSON for the Rust test to assert on.
local bin = assert(os.getenv("KERNEL_LSP_BIN"), "KERNEL_LSP_BIN")
local fixture = assert(os.getenv("KERNEL_LSP_FIXTURE"), "KERNEL_LSP_FIXTURE")
local out = assert(os.getenv("KERNEL_LSP_OUT"), "KERNEL_LSP_OUT")
local results = { steps = {} }

local function step(name) table.insert(results.steps, name) end
local function finish()
  local f = assert(io.open(out, "w"))
  f:write(vim.json.encode(results))
  f:close()
  vim.cmd("qa!")
end
local function fail(msg)
  results.error = msg
  finish()
end

local function diags(buf)
  return vim.tbl_map(function(d)
    return { lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
             severity = d.severity, source = d.source, message = d.message }
  end, vim.diagnostic.get(buf))
end

local ok, err = pcall(function()
  vim.cmd.edit(fixture)
  local buf = vim.api.nvim_get_current_buf()
  results.filetype = vim.bo[buf].filetype
  local client_id = vim.lsp.start({
    name = "kernel-lsp",
    cmd = { bin },
    root_dir = vim.fs.dirname(fixture),
    init_options = { compileOnType = false },
  })
  if not client_id then return fail("vim.lsp.start returned nil") end
  local client = vim.lsp.get_client_by_id(client_id)
  step("started")

  if not vim.wait(15000, function() return #vim.diagnostic.get(buf) > 0 end, 20) then
    return fail("no diagnostics within 15 s")
  end
  results.initial = diags(buf)
  step("diagnostics")

  local params = { textDocument = vim.lsp.util.make_text_document_params(buf) }
  local resp = client:request_sync("textDocument/documentSymbol", params, 5000, buf)
  results.symbols = vim.tbl_map(function(s) return s.name end, (resp and resp.result) or {})
  step("symbols")

  local function hover()
    -- Cursor on the kernel's name, as `K` would.
    local lnum = vim.fn.search("saxpy(", "n")
    local col = vim.fn.match(vim.fn.getline(lnum), "saxpy")
    vim.api.nvim_win_set_cursor(0, { lnum, col + 1 })
    local hp = vim.lsp.util.make_position_params(0, client.offset_encoding)
    local r = client:request_sync("textDocument/hover", hp, 5000, buf)
    return r and r.result and r.result.contents.value or vim.NIL
  end
  results.hover_with_error = hover()
  step("hover")

  -- Fix the spec mistake by editing the buffer: Neovim sends an incremental didChange.
  local bad = results.initial[1]
  vim.api.nvim_buf_set_text(buf, bad.lnum, bad.col, bad.end_lnum, bad.end_col, { "f32" })
  if not vim.wait(15000, function() return #vim.diagnostic.get(buf) == 0 end, 20) then
    results.after_fix = diags(buf)
    return fail("diagnostic still there 15 s after the fix")
  end
  results.after_fix = diags(buf)
  results.fixed_line = vim.api.nvim_buf_get_lines(buf, bad.lnum, bad.lnum + 1, false)[1]
  step("fixed")
  results.hover = hover()
  step("hover after fix")
  client:stop()
end)
if not ok then results.error = tostring(err) end
finish()
