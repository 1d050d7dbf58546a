-- Headless Neovim captures a kernel's spec (Triton, or CUDA with KERNEL_LSP_CAPTURE_AT
-- naming the line to stand on) from the author's own program, as an author would: open the kernel file (no spec), pick the code action "Capture launches
-- from…", answer the prompt with the script's command line, see the spec arrive above
-- the kernel as an edit, then undo it. Results go to $KERNEL_LSP_OUT as JSON.
local bin = assert(os.getenv("KERNEL_LSP_BIN"), "KERNEL_LSP_BIN")
local fixture = assert(os.getenv("KERNEL_LSP_FIXTURE"), "KERNEL_LSP_FIXTURE")
local command = assert(os.getenv("KERNEL_LSP_CAPTURE_CMD"), "KERNEL_LSP_CAPTURE_CMD")
local plugin = assert(os.getenv("KERNEL_LSP_PLUGIN"), "KERNEL_LSP_PLUGIN")
local H = dofile(debug.getinfo(1, "S").source:sub(2):match("(.*/)") .. "harness.lua")
local results, step, finish, fail, text = H.results, H.step, H.finish, H.fail, H.text

-- The author types the command at the prompt.
vim.ui.input = function(opts, on_confirm)
  results.prompt = opts.prompt
  on_confirm(command)
end

H.run(bin, plugin, fixture, function(kl, buf)
  vim.wait(500)
  step("started")
  results.before = text(buf)
  local lnum = vim.fn.search(os.getenv("KERNEL_LSP_CAPTURE_AT") or "def scale_rows", "n")
  vim.api.nvim_win_set_cursor(0, { lnum + 1, 4 })
  vim.lsp.buf.code_action({
    filter = function(a)
      if a.title:find("Capture launches from", 1, true) then
        results.action = a.title
        return true
      end
      return false
    end,
    apply = true,
  })
  if not vim.wait(120000, function() return text(buf):find("@bench", 1, true) ~= nil end, 50) then
    results.text = text(buf)
    return fail("the captured spec did not arrive within 120 s")
  end
  results.captured = text(buf)
  results.remembered = kl.client(buf).settings.captureCommand
  -- The server's summary follows the edit.
  vim.wait(10000, function() return #results.messages > 0 end, 20)
  step("captured")
  vim.cmd("undo")
  results.undone = text(buf)
  step("undone")
  finish()
end)
