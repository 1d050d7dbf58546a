--- kernel-lsp for Neovim 0.11+: registers the `kernel_lsp` config with vim.lsp.config,
--- enables it for CUDA buffers and for Python buffers that hold a `@triton.jit` kernel,
--- turns inlay hints on for them, and adds the :Kernel* commands that run the server's
--- workspace/executeCommand commands on the kernel under the cursor.
---
--- How Python buffers are gated: the config's `root_dir` is a function, and Neovim
--- only starts (or attaches) a client once it calls `on_dir`. It calls `on_dir` for
--- every CUDA buffer, and for a Python buffer only when its text contains
--- `@triton.jit`. A Python buffer that gains its first kernel later attaches when it is
--- written (a BufWritePost autocommand starts the client for it).
---
--- See :help kernel-lsp.
local M = {}

--- The client's name (and the vim.lsp.config name).
M.name = "kernel_lsp"

--- :Kernel* user command -> server command id (docs: editor contract).
M.commands = {
  KernelOptimize = { id = "kernel-lsp.optimize", title = "Optimize" },
  KernelTune = { id = "kernel-lsp.tune", title = "Tune parameters" },
  KernelBench = { id = "kernel-lsp.bench", title = "Benchmark" },
  KernelRevert = { id = "kernel-lsp.revert", title = "Revert" },
  KernelPin = { id = "kernel-lsp.pinBaseline", title = "Pin baseline" },
  KernelHistory = { id = "kernel-lsp.showHistory", title = "History" },
  KernelProfile = { id = "kernel-lsp.profile", title = "Profile" },
}

local defaults = {
  cmd = { "kernel-lsp" },
  -- C and C++ buffers attach only when they are headers with device code (M.wants).
  filetypes = { "cuda", "python", "c", "cpp" },
  root_markers = { ".git", ".kernel-lsp" },
  -- The server's settings (:help kernel-lsp-settings), sent as initializationOptions
  -- and as the `kernelLsp` section of workspace/configuration.
  settings = {},
  inlay_hints = true,
  -- Create the :Kernel* commands.
  user_commands = true,
  -- Extra fields merged into the vim.lsp.config (capabilities, on_init, ...).
  lsp = {},
  -- Called as on_attach(client, bufnr) after the plugin's own attach work.
  on_attach = nil,
}

--- The options of the last setup() call (read by the health check).
M.options = nil

--- Latest `kernel-lsp/status` per client id: { worker, message, job }.
local statuses = {}
--- In-flight command requests per client id: { [request_id] = title }.
local inflight = {}
local token_seq = 0

local function notify(msg, level)
  vim.notify("kernel-lsp: " .. msg, level or vim.log.levels.INFO)
end

--- True when the buffer holds a Triton kernel (the server's Python language).
function M.has_triton_kernel(bufnr)
  for _, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    -- `@triton.jit` and the call form `f = triton.jit(f)`.
    if line:find("triton.jit", 1, true) then
      return true
    end
  end
  return false
end

--- Whether a C or C++ buffer is a header with device code (`__global__`/`__device__`
--- outside `//` comments): the server reads it as CUDA.
function M.has_device_code(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr):lower()
  local header = false
  for _, ext in ipairs({ ".h", ".hpp", ".hh", ".hxx", ".inl", ".inc" }) do
    header = header or name:sub(-#ext) == ext
  end
  if not header then
    return false
  end
  for _, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    local code = line:gsub("//.*$", "")
    if code:find("__global__", 1, true) or code:find("__device__", 1, true) then
      return true
    end
  end
  return false
end

--- Whether kernel-lsp should serve this buffer: CUDA always, Python with a kernel, a C
--- or C++ header with device code.
function M.wants(bufnr)
  local ft = vim.bo[bufnr].filetype
  if ft == "python" then
    return M.has_triton_kernel(bufnr)
  end
  if ft == "c" or ft == "cpp" then
    local fts = M.options and M.options.filetypes or defaults.filetypes
    return vim.tbl_contains(fts, ft) and M.has_device_code(bufnr)
  end
  return vim.tbl_contains(M.options and M.options.filetypes or defaults.filetypes, ft)
end

local function root_for(bufnr)
  local markers = M.options and M.options.root_markers or defaults.root_markers
  local root = vim.fs.root(bufnr, markers)
  if root then
    return root
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  return name ~= "" and vim.fs.dirname(name) or vim.fn.getcwd()
end

--- The kernel-lsp client attached to `bufnr` (0: current), if any.
function M.client(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  return vim.lsp.get_clients({ bufnr = bufnr, name = M.name })[1]
end

local function status_handler(_, params, ctx)
  if type(params) == "table" then
    statuses[ctx.client_id] = {
      worker = params.worker ~= vim.NIL and params.worker or nil,
      message = params.message ~= vim.NIL and params.message or "",
      job = params.job ~= vim.NIL and params.job or nil,
    }
  end
  vim.api.nvim_exec_autocmds("User", { pattern = "KernelLspStatus", modeline = false })
  vim.cmd.redrawstatus({ bang = true })
end

--- The last `kernel-lsp/status` of the client for `bufnr` (0: current), or of any
--- kernel-lsp client: { worker = string|nil, message = string, job = string|nil }, or nil.
function M.status_data(bufnr)
  local client = M.client(bufnr)
  if client and statuses[client.id] then
    return statuses[client.id]
  end
  for _, c in ipairs(vim.lsp.get_clients({ name = M.name })) do
    if statuses[c.id] then
      return statuses[c.id]
    end
  end
  return nil
end

--- A short statusline string: the running job, else the worker's GPU, else why there is
--- none; "" when no kernel-lsp client has reported yet.
function M.status(bufnr)
  local s = M.status_data(bufnr)
  if not s then
    return ""
  end
  if s.job then
    return "kernel-lsp: " .. s.job
  end
  if s.worker then
    return "kernel-lsp: " .. s.worker
  end
  if s.message ~= "" then
    return "kernel-lsp: " .. s.message
  end
  return "kernel-lsp"
end

--- Sends `command` (a server command id) for the kernel at the cursor, or the kernel
--- named `kernel`. Progress arrives as $/progress on a fresh workDoneToken, so
--- vim.lsp.status() and LspProgress autocommands see it; the server shows the answer
--- (window/showMessage), and the plugin says only what the server does not (errors).
--- Returns the request id, or nil when no client serves the buffer.
function M.execute(command, opts)
  opts = opts or {}
  local bufnr = vim.api.nvim_get_current_buf()
  local client = M.client(bufnr)
  if not client then
    notify("no kernel-lsp client for this buffer (:checkhealth kernel_lsp)", vim.log.levels.WARN)
    return nil
  end
  local arg = { uri = vim.uri_from_bufnr(bufnr), command = opts.command }
  if opts.kernel and opts.kernel ~= "" then
    arg.kernel = opts.kernel
  else
    arg.position = vim.lsp.util.make_position_params(0, client.offset_encoding).position
  end
  token_seq = token_seq + 1
  local token = ("kernel-lsp-%d-%d"):format(vim.fn.getpid(), token_seq)
  local title = opts.title or command
  local request_id
  local ok
  ok, request_id = client:request("workspace/executeCommand", {
    command = command,
    arguments = { arg },
    workDoneToken = token,
  }, function(err, result)
    if inflight[client.id] and request_id then
      inflight[client.id][request_id] = nil
    end
    if err then
      -- -32800: RequestCancelled (after :KernelCancel).
      if err.code == -32800 then
        notify(title .. ": cancelled", vim.log.levels.WARN)
      else
        notify(title .. ": " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      end
    elseif type(result) == "table" and result.message then
      -- The server has shown this message already (window/showMessage, which Neovim
      -- passes to vim.notify), as the VS Code extension relies on: one message per result.
    else
      notify(title .. ": done")
    end
    if opts.on_done then
      opts.on_done(err, result)
    end
  end, bufnr)
  if not ok then
    notify(title .. ": the request could not be sent (is the server running?)", vim.log.levels.ERROR)
    return nil
  end
  inflight[client.id] = inflight[client.id] or {}
  inflight[client.id][request_id] = title
  return request_id
end

--- "Capture launches from…": runs `line` (your script or test; asked with vim.ui.input,
--- defaulting to the last one, when nil) with kernel-lsp's capture hook, and the server
--- writes a @bench spec above each kernel of this buffer that it launched, as one
--- undoable edit. The command is remembered in the `captureCommand` setting.
function M.capture(line, opts)
  opts = opts or {}
  local client = M.client(0)
  if not client then
    notify("no kernel-lsp client for this buffer (:checkhealth kernel_lsp)", vim.log.levels.WARN)
    return
  end
  local function go(cmdline)
    if not cmdline or cmdline == "" then
      return
    end
    client.settings = client.settings or {}
    client.settings.captureCommand = cmdline
    if M.options and M.options.settings then
      M.options.settings.captureCommand = cmdline
    end
    client:notify("workspace/didChangeConfiguration", { settings = client.settings })
    M.execute("kernel-lsp.capture", { command = cmdline, kernel = opts.kernel, title = "Capture", on_done = opts.on_done })
  end
  if line and line ~= "" then
    return go(line)
  end
  local remembered = (client.settings or {}).captureCommand
  vim.ui.input({ prompt = "Capture launches from: ", default = remembered or "" }, go)
end

--- Cancels every kernel-lsp command still running for the current buffer's client.
function M.cancel()
  local client = M.client(0)
  local n = 0
  if client and inflight[client.id] then
    for id in pairs(inflight[client.id]) do
      client:cancel_request(id)
      n = n + 1
    end
  end
  if n == 0 then
    notify("nothing to cancel")
  end
end

local function create_user_commands()
  for name, c in pairs(M.commands) do
    vim.api.nvim_create_user_command(name, function(a)
      M.execute(c.id, { kernel = a.args, title = c.title })
    end, {
      nargs = "?",
      desc = ("kernel-lsp: %s (the kernel at the cursor, or the one named)"):format(c.title),
    })
  end
  vim.api.nvim_create_user_command("KernelCapture", function(a)
    M.capture(a.args)
  end, {
    nargs = "?",
    desc = "kernel-lsp: capture launches from a command (asked when not given) and write @bench specs",
  })
  vim.api.nvim_create_user_command("KernelCancel", M.cancel, {
    desc = "kernel-lsp: cancel the running kernel commands",
  })
end

local function on_attach(client, bufnr)
  if M.options.inlay_hints then
    vim.lsp.inlay_hint.enable(true, { bufnr = bufnr })
  end
  if M.options.on_attach then
    M.options.on_attach(client, bufnr)
  end
end

--- The vim.lsp.config table for `opts` (resolved setup options).
function M.lsp_config(opts)
  local settings = opts.settings or {}
  return vim.tbl_deep_extend("force", {
    cmd = opts.cmd,
    filetypes = opts.filetypes,
    root_markers = opts.root_markers,
    root_dir = function(bufnr, on_dir)
      if M.wants(bufnr) then
        on_dir(root_for(bufnr))
      end
    end,
    init_options = settings,
    settings = { kernelLsp = settings },
    handlers = { ["kernel-lsp/status"] = status_handler },
    on_attach = on_attach,
  }, opts.lsp or {})
end

--- Registers and enables the `kernel_lsp` config. See :help kernel_lsp.setup().
function M.setup(opts)
  if vim.fn.has("nvim-0.11") == 0 or not vim.lsp.config then
    notify("needs Neovim 0.11 or newer (vim.lsp.config)", vim.log.levels.ERROR)
    return
  end
  M.options = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts or {})
  -- Lists replace, not merge (tbl_deep_extend would merge them index by index).
  for _, k in ipairs({ "cmd", "filetypes", "root_markers" }) do
    if opts and opts[k] then
      M.options[k] = opts[k]
    end
  end

  if vim.filetype.match({ filename = "kernel.cuh" }) ~= "cuda" then
    vim.filetype.add({ extension = { cu = "cuda", cuh = "cuda" } })
  end

  vim.lsp.config(M.name, M.lsp_config(M.options))
  vim.lsp.enable(M.name)
  -- The code action "Capture launches from…" asks for the command here, in the editor.
  vim.lsp.commands["kernel-lsp.capture"] = function(command)
    local arg = (command.arguments or {})[1] or {}
    M.capture(arg.command, { kernel = arg.kernel })
  end

  local group = vim.api.nvim_create_augroup("kernel_lsp", { clear = true })
  -- A Python file that gains its first `@triton.jit` attaches when written.
  vim.api.nvim_create_autocmd("BufWritePost", {
    group = group,
    callback = function(a)
      if vim.bo[a.buf].filetype ~= "python" or M.client(a.buf) then
        return
      end
      if vim.tbl_contains(M.options.filetypes, "python") and M.has_triton_kernel(a.buf) then
        local config = vim.deepcopy(vim.lsp.config[M.name])
        config.root_dir = root_for(a.buf)
        vim.lsp.start(config, { bufnr = a.buf })
      end
    end,
  })
  if M.options.user_commands then
    create_user_commands()
  end
end

return M
