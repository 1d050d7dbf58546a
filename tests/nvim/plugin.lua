-- Headless Neovim loads editors/nvim as a user would (runtimepath + setup()) and checks
-- what a user relies on: the client attaches to a CUDA file with the plugin's root and
-- settings, inlay hints are on, the :Kernel* commands exist and send the contract's
-- executeCommand (an answer, even "unknown command", comes back without a Lua error),
-- the status notification feeds require("kernel_lsp").status(), :checkhealth shows the
-- binary and worker checks, the help file has valid tags, and Python files attach only
-- with a `@triton.jit` kernel. Results go to $KERNEL_LSP_OUT as JSON for the Rust test.
local bin = assert(os.getenv("KERNEL_LSP_BIN"), "KERNEL_LSP_BIN")
local plugin = assert(os.getenv("KERNEL_LSP_PLUGIN"), "KERNEL_LSP_PLUGIN")
local work = assert(os.getenv("KERNEL_LSP_WORKDIR"), "KERNEL_LSP_WORKDIR")
local out = assert(os.getenv("KERNEL_LSP_OUT"), "KERNEL_LSP_OUT")
local results = { steps = {} }

local function step(name) table.insert(results.steps, name) end
local function finish()
  for _, c in ipairs(vim.lsp.get_clients()) do c:stop(true) end
  local f = assert(io.open(out, "w"))
  f:write(vim.json.encode(results))
  f:close()
  vim.cmd("qa!")
end
local function fail(msg)
  results.error = msg
  finish()
end

-- Everything the plugin tells the user goes through vim.notify: keep it.
local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = tostring(msg), level = level })
end
-- The plugin's own notes and the server's window/showMessage (Neovim's handler notifies
-- them as "LSP[kernel_lsp] ...").
local function kernel_notes()
  return vim.tbl_filter(function(n)
    return vim.startswith(n.msg, "kernel-lsp: ") or vim.startswith(n.msg, "LSP[kernel_lsp] ")
  end, notes)
end

local ok, err = pcall(function()
  vim.opt.rtp:append(plugin)
  local kl = require("kernel_lsp")
  kl.setup({ cmd = { bin }, settings = { compileOnType = false, arch = "sm_80" } })
  results.commands = {}
  local defined = vim.api.nvim_get_commands({})
  for _, name in ipairs({ "KernelOptimize", "KernelTune", "KernelBench", "KernelRevert",
                          "KernelPin", "KernelHistory", "KernelCancel" }) do
    results.commands[name] = defined[name] ~= nil
  end
  step("setup")

  -- CUDA: attaches, with the marker's root, the settings, and inlay hints on.
  vim.cmd.edit(work .. "/saxpy.cu")
  local buf = vim.api.nvim_get_current_buf()
  results.filetype = vim.bo[buf].filetype
  if not vim.wait(15000, function()
    local c = kl.client(buf)
    return c ~= nil and c.initialized == true
  end, 20) then
    return fail("no initialized kernel_lsp client on saxpy.cu within 15 s")
  end
  local client = kl.client(buf)
  results.client_name = client.name
  results.root_dir = client.root_dir
  results.init_options = client.config.init_options
  local answer = vim.lsp.handlers["workspace/configuration"](
    nil, { items = { { section = "kernelLsp" } } }, { client_id = client.id })
  results.configuration = answer
  vim.wait(2000, function() return vim.lsp.inlay_hint.is_enabled({ bufnr = buf }) end, 20)
  results.inlay_hints = vim.lsp.inlay_hint.is_enabled({ bufnr = buf })
  step("attached")

  -- kernel-lsp/status feeds the statusline helper.
  local status = client.handlers["kernel-lsp/status"]
  local ctx = { client_id = client.id, method = "kernel-lsp/status" }
  status(nil, { worker = vim.NIL, message = "no GPU: test", job = "optimize saxpy: verifying 2/7" }, ctx)
  results.status_job = kl.status(buf)
  status(nil, { worker = vim.NIL, message = "no GPU: test", job = vim.NIL }, ctx)
  results.status_idle = kl.status(buf)
  status(nil, { worker = "NVIDIA H100 80GB HBM3", message = "", job = vim.NIL }, ctx)
  results.status_gpu = kl.status(buf)
  step("status")

  -- The commands send the contract's request and show whatever comes back.
  local sent = {}
  local request = client.request
  client.request = function(self, method, params, handler, b)
    if method == "workspace/executeCommand" then table.insert(sent, vim.deepcopy(params)) end
    return request(self, method, params, handler, b)
  end
  local lnum = vim.fn.search("int i = blockIdx", "n")
  vim.api.nvim_win_set_cursor(0, { lnum, 4 })
  -- The first message after a command is its answer; every message it shows is kept
  -- (in results.shown[cmd]) to check that a result is shown once.
  results.shown = {}
  local function run(cmd)
    local before = #kernel_notes()
    vim.cmd(cmd)
    if not vim.wait(60000, function() return #kernel_notes() > before end, 20) then
      return nil
    end
    vim.wait(1500, function() return false end, 20)
    results.shown[cmd] = vim.list_slice(kernel_notes(), before + 1)
    return kernel_notes()[before + 1]
  end
  results.bench_answer = run("KernelBench")
  if not results.bench_answer then return fail(":KernelBench got no answer within 60 s") end
  results.pin_answer = run("KernelPin saxpy")
  if not results.pin_answer then return fail(":KernelPin got no answer within 60 s") end
  results.sent = sent
  results.cursor_line = lnum - 1
  results.uri = vim.uri_from_bufnr(buf)
  client.request = request
  step("commands")

  -- :checkhealth runs the binary's health report.
  vim.cmd("checkhealth kernel_lsp")
  local hbuf = vim.api.nvim_get_current_buf()
  results.health_filetype = vim.bo[hbuf].filetype
  results.health = vim.api.nvim_buf_get_lines(hbuf, 0, -1, false)
  vim.cmd("tabclose")
  step("health")

  -- The help file: :helptags accepts it (duplicate or broken tags would throw).
  local doc = work .. "/doc"
  vim.fn.mkdir(doc, "p")
  vim.fn.writefile(vim.fn.readfile(plugin .. "/doc/kernel-lsp.txt"), doc .. "/kernel-lsp.txt")
  local hok, herr = pcall(vim.cmd, "helptags " .. vim.fn.fnameescape(doc))
  results.helptags_error = not hok and tostring(herr) or vim.NIL
  results.tags = vim.tbl_map(function(l) return vim.split(l, "\t")[1] end,
                             vim.fn.readfile(doc .. "/tags"))
  vim.opt.rtp:append(work)
  local pok, perr = pcall(vim.cmd, "help :KernelOptimize")
  results.help_error = not pok and tostring(perr) or vim.NIL
  results.help_file = vim.fn.expand("%:t")
  vim.cmd("helpclose")
  step("help")

  -- Python: no client without a kernel; one with; one after the first kernel is written.
  vim.cmd.edit(work .. "/plain.py")
  local plain = vim.api.nvim_get_current_buf()
  results.plain_filetype = vim.bo[plain].filetype
  vim.wait(1500, function() return kl.client(plain) ~= nil end, 20)
  results.plain_attached = kl.client(plain) ~= nil
  vim.cmd.edit(work .. "/vector_add.py")
  local triton = vim.api.nvim_get_current_buf()
  results.triton_attached = vim.wait(15000, function() return kl.client(triton) ~= nil end, 20)
  vim.cmd.buffer(plain)
  vim.api.nvim_buf_set_lines(plain, -1, -1, false, {
    "import triton", "", "@triton.jit", "def k(x_ptr):", "    pass" })
  vim.cmd.write()
  results.plain_attached_after_write =
    vim.wait(15000, function() return kl.client(plain) ~= nil end, 20)
  step("python")

  -- Headers: a `.h` with a kernel attaches (the server reads it as CUDA); a host-only
  -- `.h` does not.
  vim.cmd.edit(work .. "/host_only.h")
  local host_h = vim.api.nvim_get_current_buf()
  vim.wait(1500, function() return kl.client(host_h) ~= nil end, 20)
  results.host_header_attached = kl.client(host_h) ~= nil
  vim.cmd.edit(work .. "/device_kernels.h")
  local dev_h = vim.api.nvim_get_current_buf()
  results.device_header_filetype = vim.bo[dev_h].filetype
  results.device_header_attached =
    vim.wait(15000, function() return kl.client(dev_h) ~= nil end, 20)
  step("headers")

  results.errmsg = vim.v.errmsg
  results.notes = notes
end)
if not ok then results.error = tostring(err) end
finish()
