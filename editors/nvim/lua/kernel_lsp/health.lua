--- :checkhealth kernel_lsp. Checks Neovim's version and the plugin's setup, finds the
--- server binary and its version, then runs `kernel-lsp health --json` (with the
--- plugin's settings as --config, and `settings.worker` as --worker) and reports each of
--- its findings: NVRTC, ptxas, the worker and its GPU, the CUDA and Triton backends, and
--- the configured LLM endpoints.
local M = {}

local health = vim.health

--- How long `kernel-lsp health` may take: it starts a worker, which probes Python.
local HEALTH_TIMEOUT_MS = 60000

local function report(name, check)
  if type(check) ~= "table" then
    health.error(name .. ": missing from the report (server and plugin versions differ?)")
    return
  end
  local msg = name .. ": " .. tostring(check.message)
  local level = check.level or (check.ok and "ok" or "warn")
  if level == "ok" then
    health.ok(msg)
  elseif level == "warn" then
    health.warn(msg)
  else
    health.error(msg)
  end
end

--- Writes the settings to a temporary JSON file for --config; nil when there are none.
local function settings_file(settings)
  if type(settings) ~= "table" or vim.tbl_isempty(settings) then
    return nil
  end
  local path = vim.fn.tempname() .. "-kernel-lsp.json"
  local f = io.open(path, "w")
  if not f then
    return nil
  end
  f:write(vim.json.encode(settings))
  f:close()
  return path
end

function M.check()
  health.start("kernel-lsp: Neovim and plugin")
  if vim.fn.has("nvim-0.11") == 1 and vim.lsp.config then
    health.ok("Neovim " .. tostring(vim.version()) .. " (vim.lsp.config available)")
  else
    health.error("Neovim " .. tostring(vim.version()) .. " is too old", { "Install Neovim 0.11 or newer." })
  end
  local kl = require("kernel_lsp")
  local opts = kl.options
  if not opts then
    health.error("require('kernel_lsp').setup() has not been called", {
      "Add `require('kernel_lsp').setup({})` to your config (:help kernel_lsp.setup()).",
    })
    return
  end
  health.ok("setup() done; filetypes: " .. table.concat(opts.filetypes, ", "))
  local clients = vim.lsp.get_clients({ name = kl.name })
  if #clients == 0 then
    health.info("no kernel-lsp client running (open a .cu file or a Python file with @triton.jit)")
  else
    for _, c in ipairs(clients) do
      local bufs = vim.tbl_keys(c.attached_buffers or {})
      health.info(("client %d: root %s, %d buffer(s)"):format(c.id, tostring(c.root_dir), #bufs))
    end
  end

  health.start("kernel-lsp: server binary")
  local cmd = opts.cmd
  if type(cmd) ~= "table" or not cmd[1] then
    health.warn("`cmd` is not a list (a function?); cannot check the binary", {
      "Set `cmd = { 'kernel-lsp' }` or the binary's full path.",
    })
    return
  end
  local bin = vim.fn.exepath(cmd[1])
  if bin == "" then
    health.error(("`%s` is not an executable on $PATH"):format(cmd[1]), {
      "Build it (`cargo build --release`) and put target/release/kernel-lsp on $PATH,",
      "or set `cmd = { '/full/path/to/kernel-lsp' }` in setup().",
    })
    return
  end
  local v = vim.system({ bin, "--version" }, { text = true }):wait(10000)
  if v.code ~= 0 then
    health.error(("`%s --version` failed (exit %s): %s"):format(bin, tostring(v.code), vim.trim(v.stderr or "")))
    return
  end
  health.ok(("%s (%s)"):format(vim.trim(v.stdout or ""), bin))

  local args = { bin, "health", "--json" }
  local settings = opts.settings or {}
  local config = settings_file(settings)
  if config then
    vim.list_extend(args, { "--config", config })
  end
  if type(settings.worker) == "string" and settings.worker ~= "" then
    vim.list_extend(args, { "--worker", settings.worker })
  end
  local r = vim.system(args, { text = true }):wait(HEALTH_TIMEOUT_MS)
  if config then
    os.remove(config)
  end
  if r.code == 2 or (r.stdout or "") == "" then
    health.error(("`kernel-lsp health` failed (exit %s): %s"):format(tostring(r.code), vim.trim(r.stderr or "")), {
      "An older binary has no `health` command: rebuild kernel-lsp.",
    })
    return
  end
  local ok, rep = pcall(vim.json.decode, r.stdout, { luanil = { object = true, array = true } })
  if not ok or type(rep) ~= "table" then
    health.error("`kernel-lsp health --json` printed something that is not JSON: " .. tostring(rep))
    return
  end

  health.start("kernel-lsp: compiler (as you type)")
  if rep.config then
    report("settings", rep.config)
  end
  report("nvrtc", rep.nvrtc)
  report("ptxas", rep.ptxas)

  health.start("kernel-lsp: worker (verify and time)")
  report("worker", rep.worker)
  report("cuda", rep.cuda)
  report("triton", rep.triton)
  if rep.ncu then
    report("ncu (profiles)", rep.ncu)
  end

  health.start("kernel-lsp: LLM endpoints")
  if type(rep.llm) ~= "table" or #rep.llm == 0 then
    health.info("none configured: the embedded policy and rewrites do the work (settings.llm)")
  else
    for _, l in ipairs(rep.llm) do
      report("llm." .. tostring(l.role), l)
    end
  end
end

return M
