// MCP tools in the real window (issue 33): Settings → Tools (MCP) adds the
// filesystem server from npm (src-tauri/tests/mcp_servers, installed by
// scripts/setup.sh --app) on a temp folder and shows it ready with its
// tools; a chat turns it on in its settings (one tool of it, and asks for
// a tool call first); the model's call shows with Approve / Deny, Approve runs it, the
// result shows as text and the model answers after it; on the next message
// Deny sends the refusal to the model instead, which answers after it. The
// server's On switch stops it and starts it again.
//
// The model is the tiny random Qwen2-VL with a Hermes-style tool template
// written over its own: its call is whatever the grammar in that format
// lets random weights pick, so the test checks the path, not the words.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  byTestId, loadModelFromDisk, modelReady, openApp, openPage, root, send, shot, startDriver, stopDriver, tempFolder, waitFor,
  writeTinyVisionModel,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-tools-');
const hfHome = tempFolder('vlm-e2e-tools-hf-');
const shared = tempFolder('vlm-e2e-tools-shared-');
const repo = 'e2e/tiny-tools';
let browser;

const TOOLS_TEMPLATE = '{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}. '
  + 'Call one as <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call><|im_end|>\n{% endif %}'
  + '{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n'
  + "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}"
  + '{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}'
  + '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

/** The tiny model with the tool template and room for the server's tool schemas (a token per byte). */
function writeToolModel() {
  writeTinyVisionModel(hfHome, repo);
  const snapshots = join(hfHome, 'hub', `models--${repo.replace('/', '--')}`, 'snapshots');
  const folder = join(snapshots, readdirSync(snapshots)[0]);
  const tokenizer = JSON.parse(readFileSync(join(folder, 'tokenizer_config.json'), 'utf8'));
  tokenizer.chat_template = TOOLS_TEMPLATE;
  writeFileSync(join(folder, 'tokenizer_config.json'), JSON.stringify(tokenizer));
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8'));
  config.max_position_embeddings = 32768;
  if (config.text_config) config.text_config.max_position_embeddings = 32768;
  writeFileSync(join(folder, 'config.json'), JSON.stringify(config));
}

describe('tools from an MCP server', () => {
  before(async () => {
    writeToolModel();
    mkdirSync(join(shared, 'notes'), { recursive: true });
    writeFileSync(join(shared, 'notes', 'todo.txt'), 'buy milk');
    await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: hfHome });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('adds a server, turns it on in a chat, approves a call and shows its result and the answer after it', async () => {
    await modelReady(browser);
    await loadModelFromDisk(browser, `hf:${repo}`, repo);

    // Settings → Tools (MCP): the server starts and lists its tools
    await openPage(browser, 'nav-settings', 'mcp-section');
    const bin = join(root, 'src-tauri/tests/mcp_servers/node_modules/.bin/mcp-server-filesystem');
    await (await byTestId(browser, 'mcp-name')).setValue('files');
    await (await byTestId(browser, 'mcp-target')).setValue(`${bin} ${shared}`);
    await (await byTestId(browser, 'mcp-add')).click();
    await waitFor(browser, 'the server to be ready', () => browser.execute(() =>
      document.querySelector('[data-testid="mcp-server"][data-name="files"]')?.getAttribute('data-state') === 'ready'), 60_000);
    const status = await browser.execute(() => document.querySelector('[data-testid="mcp-server"][data-name="files"] [data-testid="mcp-status"]').textContent);
    assert.match(status, /^ready · \d+ tools$/);
    // switched off it stops (and is kept); on again it starts
    const state = () => browser.execute(() => document.querySelector('[data-testid="mcp-server"][data-name="files"]')?.getAttribute('data-state'));
    await (await byTestId(browser, 'mcp-enabled')).click();
    await waitFor(browser, 'the server to be off', async () => (await state()) === 'stopped', 20_000);
    await (await byTestId(browser, 'mcp-enabled')).click();
    await waitFor(browser, 'the server to be ready again', async () => (await state()) === 'ready', 60_000);
    await (await browser.$('[data-testid="mcp-server"] details')).click();
    await shot(browser, 'tools-01-settings');
    // Edit fills the form with the server, its name fixed; Cancel leaves it as it was
    await (await byTestId(browser, 'mcp-edit')).click();
    const form = await browser.execute(() => ({
      name: document.querySelector('[data-testid="mcp-name"]').value,
      fixed: document.querySelector('[data-testid="mcp-name"]').readOnly,
      target: document.querySelector('[data-testid="mcp-target"]').value,
      save: document.querySelector('[data-testid="mcp-add"]').textContent,
    }));
    assert.deepEqual(form, { name: 'files', fixed: true, target: `${bin} ${shared}`, save: 'Save files' });
    await browser.execute(() => document.querySelector('[data-testid="mcp-values"]').scrollIntoView({ block: 'center' }));
    await shot(browser, 'tools-01b-edit');
    await (await byTestId(browser, 'mcp-cancel-edit')).click();

    // a new chat turns the server on, asking for a tool call first
    await openPage(browser, 'new-chat', 'composer-input');
    await (await byTestId(browser, 'open-chat-settings')).click();
    await (await byTestId(browser, 'chat-settings-dialog')).waitForExist({ timeout: 10_000 });
    // one tool without arguments left on: the random model's call is then quick to write
    // (a path it makes up, with the run's random temp folder in the prompt, may not end
    // within the answer's tokens, and no call would wait)
    await browser.execute(() => {
      document.querySelector('[data-testid="chat-tool-server"][value="files"]').click();
      document.querySelector('[data-testid="chat-tools-require"]').click();
      for (const box of document.querySelectorAll('[data-testid="chat-tool"]')) {
        if (box.checked !== (box.value === 'files/list_allowed_directories')) box.click();
      }
    });
    await (await byTestId(browser, 'chat-setting-max_tokens')).setValue('400');
    await (await byTestId(browser, 'chat-settings-save')).click();

    // the call waits for Approve
    await send(browser, 'What is on my todo list?');
    await waitFor(browser, 'the call to wait for approval', async () => (await byTestId(browser, 'tool-approval')).isExisting(), 120_000);
    const asked = await browser.execute(() => ({
      name: document.querySelector('[data-testid="tool-approval"] code').textContent,
      args: document.querySelector('[data-testid="tool-args"]').textContent,
      calls: document.querySelectorAll('[data-testid="tool-call"]').length,
    }));
    assert.ok(asked.name.length > 0, 'the call names its tool');
    assert.equal(asked.calls, 1, 'the answer that called shows its call');
    JSON.parse(asked.args); // the arguments are the JSON the grammar made
    await shot(browser, 'tools-02-approval');
    await (await byTestId(browser, 'tool-approve')).click();

    // the result (text, whatever the tool said) and the model's answer after it
    await waitFor(browser, 'the answer after the result', () => browser.execute(() =>
      document.querySelectorAll('[data-testid="msg-tool"]').length === 1
      && document.querySelectorAll('[data-testid="msg-live"]').length === 0
      && document.querySelectorAll('[data-testid="msg-assistant"]').length === 2), 120_000);
    const result = await browser.execute(() => {
      const tool = document.querySelector('[data-testid="msg-tool"]');
      return { outcome: tool.getAttribute('data-outcome'), text: tool.querySelector('[data-testid="tool-output"]').textContent, approval: !!document.querySelector('[data-testid="tool-approval"]') };
    });
    assert.ok(['ok', 'error'].includes(result.outcome), `the tool ran: ${result.outcome}`);
    assert.ok(result.text.length > 0, 'its output shows');
    assert.equal(result.approval, false, 'nothing waits any more');
    await browser.execute(() => document.querySelector('[data-testid="msg-tool"]').setAttribute('open', ''));
    await shot(browser, 'tools-03-result');
  });

  it('Deny sends the refusal to the model, which answers after it', async () => {
    await send(browser, 'And what else is there?');
    await waitFor(browser, 'the next call to wait for approval', async () => (await byTestId(browser, 'tool-approval')).isExisting(), 120_000);
    await (await byTestId(browser, 'tool-deny')).click();
    // the refusal is stored as the call's result, and the model is asked again with it
    await waitFor(browser, 'the refusal and the answer after it', () => browser.execute(() =>
      document.querySelectorAll('[data-testid="msg-tool"]').length === 2
      && (document.querySelectorAll('[data-testid="msg-live"]').length === 1
        || document.querySelectorAll('[data-testid="msg-assistant"]').length === 4)), 120_000);
    const denied = await browser.execute(() => {
      const tool = document.querySelectorAll('[data-testid="msg-tool"]')[1];
      return { outcome: tool.getAttribute('data-outcome'), text: tool.querySelector('[data-testid="tool-output"]').textContent, approval: !!document.querySelector('[data-testid="tool-approval"]') };
    });
    assert.equal(denied.outcome, 'denied');
    assert.match(denied.text, /denied this call/);
    assert.equal(denied.approval, false, 'nothing waits any more');
    await shot(browser, 'tools-04-denied');
  });
});
