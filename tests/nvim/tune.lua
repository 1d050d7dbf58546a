-- Headless Neovim runs kernel-lsp's jobs as an author would, with the plugin from
-- editors/nvim (runtimepath + setup()): open a Triton kernel with a deliberately poor
-- BLOCK, run :KernelTune with the cursor in it (the worker verifies every candidate on
-- Triton's CPU interpreter), see the verified edit land in the buffer and the timing
-- hint appear; then break the kernel, pick "Benchmark" from the code actions, see the
-- verification error on the kernel name, and pick the "Revert to last verified version"
-- quick fix. Results go to $KERNEL_LSP_OUT as JSON for the Rust test.
local bin = assert(os.getenv("KERNEL_LSP_BIN"), "KERNEL_LSP_BIN")
local fixture = assert(os.getenv("KERNEL_LSP_FIXTURE"), "KERNEL_LSP_FIXTURE")
local plugin = assert(os.getenv("KERNEL_LSP_PLUGIN"), "KERNEL_LSP_PLUGIN")
local H = dofile(debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "harness.lua")
local results, step, finish, fail, text = H.results, H.step, H.finish, H.fail, H.text

-- Picks the code action whose title contains `pattern` (the answer comes back
-- asynchronously; the picked title is stored in results[key]).
local function run_action(key, pattern)
  local lnum = vim.fn.search("def add_kernel", "n")
  vim.api.nvim_win_set_cursor(0, { lnum + 1, 4 })
  vim.lsp.buf.code_action({
    filter = function(a)
      if a.title:find(pattern, 1, true) then
        results[key] = a.title
        return true
      end
      return false
    end,
    apply = true,
  })
end

H.run(bin, plugin, fixture, function(kl, buf)
  local client = kl.client(buf)
  vim.wait(500)
  step("started")
  results.before = text(buf)

  -- 1. Tune parameters with the plugin's command, cursor in the kernel.
  local lnum = vim.fn.search("def add_kernel", "n")
  vim.api.nvim_win_set_cursor(0, { lnum + 1, 4 })
  vim.cmd("KernelTune")
  results.tune_action = "KernelTune"
  if not vim.wait(180000, function() return text(buf):find("BLOCK = 1024", 1, true) ~= nil end, 50) then
    results.text = text(buf)
    return fail("the tuned edit did not arrive within 180 s")
  end
  results.tuned = text(buf)
  step("tuned")

  local hp = { textDocument = vim.lsp.util.make_text_document_params(buf),
               range = { start = { line = 0, character = 0 }, ["end"] = { line = 100, character = 0 } } }
  local r = client:request_sync("textDocument/inlayHint", hp, 5000, buf)
  results.hints = vim.tbl_map(function(h)
    local label = h.label
    if type(label) ~= "string" then label = table.concat(vim.tbl_map(function(p) return p.value end, label)) end
    return { line = h.position.line, label = label }
  end, (r and r.result) or {})
  step("hint")

  -- 2. Break the kernel, benchmark it: the verification error shows on the kernel.
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  for i, l in ipairs(lines) do
    if l:find("x + y", 1, true) then
      vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { (l:gsub("x %+ y", "x - y")) })
    end
  end
  results.broken = text(buf)
  vim.wait(300)
  run_action("bench_action", "Benchmark")
  local function verify_diag()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      if d.code == "verify" then return d end
    end
  end
  if not vim.wait(120000, function() return verify_diag() ~= nil end, 50) then
    return fail("no verification diagnostic within 120 s")
  end
  local d = verify_diag()
  results.failure = { lnum = d.lnum, col = d.col, severity = d.severity, message = d.message,
                      related = d.user_data and d.user_data.lsp and d.user_data.lsp.relatedInformation }
  step("failure shown")

  -- 3. The quick fix restores the last verified text.
  run_action("revert_action", "Revert to last verified version")
  if not vim.wait(20000, function() return text(buf) == results.tuned end, 50) then
    results.text = text(buf)
    return fail("the revert did not restore the verified text")
  end
  step("reverted")
  finish()
end)
