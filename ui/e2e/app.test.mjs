// The real app in a real window (Xvfb), driven through tauri-driver and
// WebKitWebDriver, on a fresh data folder with the default model:
// chat with a streamed reply, a real OS drag and drop of an image, reload,
// settings kept, two chats answering at once, a restart that keeps it all,
// and a vision model (a tiny random Qwen2-VL put in the run's Hugging Face
// cache) loaded from the Models screen that answers about a dropped image.
// Screenshots of every screen go to screenshots/ (ignored by git).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { allByTestId, appWindowGeometry, byTestId, here, openApp, root, shot, startDriver, stopDriver, waitFor } from './harness.mjs';

const dataDir = mkdtempSync(join(tmpdir(), 'vlm-e2e-'));
const hfHome = join(dataDir, 'hf');
let browser;

/** The tiny vision model's repository in the run's Hugging Face cache. */
const visionRepo = 'e2e/Tiny-Qwen2-VL';

/** Puts a tiny random Qwen2-VL (a complete Hugging Face folder: config with a
 * vision tower, safetensors, tokenizer, chat template, image preprocessor)
 * into the run's Hugging Face cache, where the app looks for downloaded
 * models. Its answers are random text, but the whole image path runs. The
 * writer is an engine example that `cargo test --all-targets` builds. */
function writeTinyVisionModel() {
  const writer = process.env.VLM_TINY_VL_WRITER ?? join(root, 'target/debug/examples/write_tiny_vl_model');
  const out = mkdtempSync(join(tmpdir(), 'vlm-e2e-vl-'));
  execFileSync(writer, [out]);
  const repo = join(hfHome, 'hub', `models--${visionRepo.replace('/', '--')}`);
  const commit = 'e2e'.padEnd(40, '0');
  cpSync(join(out, 'qwen2_vl', 'float'), join(repo, 'snapshots', commit), { recursive: true });
  mkdirSync(join(repo, 'refs'), { recursive: true });
  writeFileSync(join(repo, 'refs', 'main'), commit);
}

const statusText = async (b) => textOf(b, await byTestId(b, 'status-bar'));

/** An <img>'s picture has loaded with this width (it shows, not a broken icon). */
const imageLoaded = (b, el, width) => b.execute((e, w) => e.complete && e.naturalWidth === w, el, width);

async function modelReady(b) {
  await waitFor(b, 'the default model to load', async () => (await (await byTestId(b, 'status-bar')).getText()).includes('running'));
}

async function send(b, text) {
  const input = await byTestId(b, 'composer-input');
  await input.click();
  await input.setValue(text);
  await b.keys(['Enter']);
}

/** The element's text as the DOM has it (WebDriver's getText leaves out clipped text). */
const textOf = (b, el) => b.execute((e) => e.textContent, el);

/** Opens a page from the sidebar and waits for an element of it. A click
 * that lands while the page is still settling after a reload is retried once
 * (with a screenshot of what was on screen, to see why). */
async function openPage(b, nav, marker) {
  for (let attempt = 0; attempt < 2; attempt++) {
    await (await byTestId(b, nav)).waitForClickable({ timeout: 20_000 });
    await (await byTestId(b, nav)).click();
    try {
      await (await byTestId(b, marker)).waitForExist({ timeout: 10_000 });
      return;
    } catch (e) {
      if (attempt === 1) throw e;
      await shot(b, `retry-${nav}`);
    }
  }
}

/** Opens Settings, sets each `setting-<key>` field, saves and waits for "Saved.". */
async function saveSettings(b, values) {
  await openPage(b, 'nav-settings', 'setting-system_prompt');
  for (const [key, value] of Object.entries(values)) await (await byTestId(b, `setting-${key}`)).setValue(value);
  await (await byTestId(b, 'save-settings')).click();
  await waitFor(b, 'saved', async () => (await (await byTestId(b, 'settings-saved')).getText()) === 'Saved.', 10_000);
}

async function lastAnswerText(b) {
  const answers = await allByTestId(b, 'msg-assistant');
  return answers.length ? answers[answers.length - 1].getText() : '';
}

/** Drags `file` from a GTK window onto the app window with the mouse (XDND). */
async function dropFile(file) {
  const app = appWindowGeometry();
  const source = spawn('/usr/bin/python3', [join(here, 'drag_source.py'), file, String(app.x + app.width + 40), '80'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const said = [];
  source.stdout.on('data', (d) => said.push(...d.toString().trim().split('\n')));
  await new Promise((resolve, reject) => {
    const t = setInterval(() => { if (said.includes('ready')) { clearInterval(t); resolve(); } }, 100);
    source.on('exit', (code) => { clearInterval(t); reject(new Error(`drag source exited ${code}`)); });
  });
  const ids = execFileSync('xdotool', ['search', '--onlyvisible', '--name', '^e2e-drag-source$']).toString().trim().split('\n');
  const geo = Object.fromEntries(execFileSync('xdotool', ['getwindowgeometry', '--shell', ids[0]]).toString().trim().split('\n').map((l) => l.split('=')));
  const sx = Number(geo.X) + 100; const sy = Number(geo.Y) + 60;
  const tx = app.x + Math.round(app.width / 2); const ty = app.y + Math.round(app.height / 2);
  const xdo = (...args) => execFileSync('xdotool', args.map(String));
  xdo('mousemove', sx, sy);
  xdo('mousedown', 1);
  for (let i = 1; i <= 20; i++) {
    xdo('mousemove', Math.round(sx + ((tx - sx) * i) / 20), Math.round(sy + ((ty - sy) * i) / 20));
    await new Promise((r) => setTimeout(r, 40));
  }
  await new Promise((r) => setTimeout(r, 300));
  xdo('mouseup', 1);
  await new Promise((resolve) => {
    const t = setInterval(() => { if (said.includes('done')) { clearInterval(t); resolve(); } }, 100);
    setTimeout(() => { clearInterval(t); resolve(); }, 10_000);
  });
  source.kill();
}

describe('the desktop app', () => {
  before(async () => {
    writeTinyVisionModel();
    await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: hfHome });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    // webdriver's keep-alive sockets can hold the process open after the suite
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('starts with the default model and streams a reply', async () => {
    await modelReady(browser);
    await shot(browser, '01-empty-chat');
    // Greedy and short: a 135M model sampled at the default temperature can
    // ramble through its whole token budget.
    await saveSettings(browser, { temperature: '0', max_tokens: '64' });
    await (await byTestId(browser, 'nav-chat')).click();
    await send(browser, 'What is the capital of France?');
    // the reply shows up while it streams, then becomes a finished message
    await waitFor(browser, 'the live reply', async () => (await allByTestId(browser, 'msg-live')).length > 0 || (await allByTestId(browser, 'msg-assistant')).length > 0);
    await waitFor(browser, 'the finished reply', async () => (await lastAnswerText(browser)).trim().length > 0);
    const user = await allByTestId(browser, 'msg-user');
    assert.equal(user.length, 1);
    assert.match(await textOf(browser, user[0]), /capital of France/);
    const items = await allByTestId(browser, 'chat-item');
    assert.equal(items.length, 1);
    assert.match(await textOf(browser, items[0]), /What is the capital of France/);
    await shot(browser, '02-chat-reply');
  });

  it('takes an image dropped from another window and shows its thumbnail', async () => {
    const png = join(dataDir, 'red.png');
    execFileSync('convert', ['-size', '64x48', 'xc:#d33', png]);
    await dropFile(png);
    await waitFor(browser, 'the thumbnail', async () => (await allByTestId(browser, 'composer-thumb')).length === 1, 30_000);
    const img = await browser.$('[data-testid="composer-thumb"] img');
    await waitFor(browser, 'the thumbnail image to load', async () => browser.execute((el) => el.complete && el.naturalWidth === 64, img), 30_000);
    await shot(browser, '03-dropped-thumbnail');
    // the default model reads text only: the reply says so plainly
    await send(browser, 'What colour is this?');
    await waitFor(browser, 'the image error', async () => (await allByTestId(browser, 'reply-error')).length > 0);
    assert.equal((await allByTestId(browser, 'msg-image')).length, 1);
    // explained by the engine's code (kept with the reply) and the model's lack of vision
    const error = await byTestId(browser, 'reply-error');
    assert.equal(await error.getAttribute('data-code'), 'INVALID_REQUEST');
    assert.match(await textOf(browser, error), /^This model cannot see images\./);
    await shot(browser, '04-image-on-text-model');
  });

  it('finds the chat again after a reload', async () => {
    await browser.refresh();
    await waitFor(browser, 'the chat list', async () => (await allByTestId(browser, 'chat-item')).length === 1);
    await (await allByTestId(browser, 'chat-item'))[0].click();
    await waitFor(browser, 'the messages', async () => (await allByTestId(browser, 'msg-user')).length === 2);
    assert.equal((await allByTestId(browser, 'msg-image')).length, 1);
  });

  it('keeps a changed setting', async () => {
    await saveSettings(browser, { system_prompt: 'You are a helpful assistant.', max_tokens: '96' });
    await shot(browser, '05-settings');
    await browser.refresh();
    await openPage(browser, 'nav-settings', 'setting-system_prompt');
    assert.equal(await (await byTestId(browser, 'setting-system_prompt')).getValue(), 'You are a helpful assistant.');
    assert.equal(await (await byTestId(browser, 'setting-max_tokens')).getValue(), '96');
  });

  it('shows the model gallery', async () => {
    await (await byTestId(browser, 'nav-models')).click();
    await waitFor(browser, 'the gallery', async () => (await allByTestId(browser, 'catalog-model')).length > 3, 20_000);
    assert.match(await (await byTestId(browser, 'loaded-model')).getText(), /SmolLM2|smollm/i);
    await shot(browser, '06-models');
  });

  it('answers in two chats at once', async () => {
    // long answers, so the first is still running when the second starts
    await saveSettings(browser, { max_tokens: '160' });
    await (await byTestId(browser, 'nav-chat')).click();
    await (await byTestId(browser, 'new-chat')).click();
    await send(browser, 'Count from 1 to 300, one number per line.');
    await waitFor(browser, 'the first chat to start', async () => (await allByTestId(browser, 'stop')).length > 0 && (await (await byTestId(browser, 'stop')).isDisplayed()));
    await (await byTestId(browser, 'new-chat')).click();
    await send(browser, 'Count from 300 down to 1, one number per line.');
    // both chats are answering at the same moment, each with its own progress
    await waitFor(browser, 'two chats answering', async () => (await browser.$$('.busy-dot')).length === 2, 60_000);
    await waitFor(browser, 'tokens in the open chat', async () => {
      const live = await browser.$$('[data-testid="msg-live"] [data-testid="answer"]');
      return live.length > 0 && (await textOf(browser, live[0])).length > 0;
    });
    await shot(browser, '07-two-chats');
    await waitFor(browser, 'both to finish', async () => (await browser.$$('.busy-dot')).length === 0);
    assert.equal((await allByTestId(browser, 'chat-item')).length, 3);
  });

  it('keeps chats, images and settings across a restart', async () => {
    await browser.deleteSession();
    browser = await openApp();
    await modelReady(browser);
    await waitFor(browser, 'the chats', async () => (await allByTestId(browser, 'chat-item')).length === 3, 30_000);
    const items = await allByTestId(browser, 'chat-item');
    await items[items.length - 1].click(); // the oldest: the first chat, with the image
    await waitFor(browser, 'its messages', async () => (await allByTestId(browser, 'msg-image')).length === 1);
    await shot(browser, '08-after-restart');
    await openPage(browser, 'nav-settings', 'setting-system_prompt');
    assert.equal(await (await byTestId(browser, 'setting-system_prompt')).getValue(), 'You are a helpful assistant.');
    await shot(browser, '09-settings-after-restart');
  });

  it('loads a vision model from the Models screen and answers about a dropped image', async () => {
    await openPage(browser, 'nav-models', 'local-models');
    const row = () => browser.$(`[data-testid="local-model"][data-model-id="hf:${visionRepo}"]`);
    await waitFor(browser, 'the vision model on disk', async () => (await row()).isExisting(), 20_000);
    // the Models screen says which models on disk can see images
    assert.equal(await textOf(browser, await (await row()).$('[data-testid="vision-badge"]')), 'Vision');
    const builtIn = await browser.$('[data-testid="local-model"][data-model-id="dir:SmolLM2-135M-Instruct.Q4_1.gguf"]');
    assert.equal(await builtIn.isExisting(), true, 'the built-in text model is listed');
    assert.equal(await (await builtIn.$('[data-testid="vision-badge"]')).isExisting(), false);
    await (await (await row()).$('[data-testid="load-model"]')).click();
    const loaded = async () => textOf(browser, await byTestId(browser, 'loaded-model'));
    // named by its repository, not by the snapshot folder (a commit hash) the engine loads from
    await waitFor(browser, 'the vision model to load', async () => (await loaded()).includes(visionRepo) && (await loaded()).includes('Vision'));
    assert.doesNotMatch(await loaded(), /e2e0{10}/);
    await waitFor(browser, 'its empty vision cache in the status bar', async () => {
      const text = await statusText(browser);
      return text.includes(visionRepo) && text.includes('vision cache 0 hits · 0 misses');
    }, 20_000);
    // clicking Load scrolled the list: show the Loaded card (name, Vision badge) in the picture
    await browser.execute((e) => e.scrollIntoView({ block: 'start' }), await byTestId(browser, 'loaded-model'));
    await shot(browser, '10-vision-model-loaded');

    await (await byTestId(browser, 'nav-chat')).click();
    await (await byTestId(browser, 'new-chat')).click();
    await dropFile(join(root, 'crates/engine/tests/fixtures/images/qwen_parity_320x240.png'));
    await waitFor(browser, 'the thumbnail', async () => (await allByTestId(browser, 'composer-thumb')).length === 1, 30_000);
    await send(browser, 'What is in this picture?');
    // the sent message shows the picture itself, through the app's att:// protocol
    await waitFor(browser, 'the image in the sent message', async () => {
      const images = await allByTestId(browser, 'msg-image');
      return images.length === 1 && imageLoaded(browser, images[0], 320);
    }, 30_000);
    await waitFor(browser, 'the finished reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 1 && (await allByTestId(browser, 'msg-live')).length === 0);
    assert.equal((await allByTestId(browser, 'reply-error')).length, 0, 'the vision model answers without an error');
    const reply = (await allByTestId(browser, 'msg-assistant'))[0];
    assert.equal(await textOf(browser, await reply.$('.msg-model')), visionRepo);
    assert.match(await textOf(browser, await byTestId(browser, 'stats')), /\d+ tokens .*ended: (stop|length)/);
    // the image was encoded once: a miss in the engine's vision cache
    await waitFor(browser, 'a vision-cache miss', async () => (await statusText(browser)).includes('vision cache 0 hits · 1 miss'), 20_000);
    await shot(browser, '11-vision-reply');

    // the image stays in the chat's history: the next turn sends it again, and
    // the engine takes its features from the cache (a hit, no second miss) and
    // the turn's start from the prefix cache
    await send(browser, 'Describe it in one word.');
    await waitFor(browser, 'the second reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 2 && (await allByTestId(browser, 'msg-live')).length === 0);
    assert.equal((await allByTestId(browser, 'reply-error')).length, 0);
    assert.equal((await allByTestId(browser, 'msg-image')).length, 1, 'the image shows once, with the first message');
    await waitFor(browser, 'a vision-cache hit', async () => (await statusText(browser)).includes('vision cache 1 hit · 1 miss'), 20_000);
    assert.match(await statusText(browser), /prefix hits [1-9]/);
    await shot(browser, '12-vision-second-turn');
  });
});

writeFileSync(join(dataDir, 'README'), 'data folder of one end-to-end run\n');
