-- What the headless Neovim tests share: results collected for the Rust side, written to
-- $KERNEL_LSP_OUT as JSON when the script finishes (or fails), and the buffer's text.
local H = { results = { steps = {}, messages = {} } }
local out = assert(os.getenv("KERNEL_LSP_OUT"), "KERNEL_LSP_OUT")

function H.step(name) table.insert(H.results.steps, name) end

function H.finish()
  local f = assert(io.open(out, "w"))
  f:write(vim.json.encode(H.results))
  f:close()
  vim.cmd("qa!")
end

function H.fail(msg)
  H.results.error = msg
  H.finish()
end

function H.text(buf) return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") end

-- The plugin from `plugin` set up with the server `bin`, `fixture` opened: the plugin
-- module and the buffer once its client has attached, else nil.
function H.open(bin, plugin, fixture)
  vim.opt.rtp:append(plugin)
  local kl = require("kernel_lsp")
  kl.setup({ cmd = { bin }, settings = { compileOnType = false } })
  vim.cmd.edit(fixture)
  local buf = vim.api.nvim_get_current_buf()
  local attached = vim.wait(15000, function()
    local c = kl.client(buf)
    return c ~= nil and c.initialized == true
  end, 20)
  if not attached then
    return nil
  end
  return kl, buf
end

-- Runs `body(kl, buf)` once the plugin's client has attached to `fixture`; an error in
-- it, or no client, ends the script with the error in the results.
function H.run(bin, plugin, fixture, body)
  local ok, err = pcall(function()
    local kl, buf = H.open(bin, plugin, fixture)
    if not kl then
      return H.fail("the plugin's client did not attach to the Triton file")
    end
    body(kl, buf)
  end)
  if not ok then H.fail(tostring(err)) end
end

-- Collect what the server tells the user.
vim.lsp.handlers["window/showMessage"] = function(_, r)
  table.insert(H.results.messages, r.message)
end

return H
