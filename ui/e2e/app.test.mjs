// The real app in a real window (Xvfb), driven through tauri-driver and
// WebKitWebDriver, on a fresh data folder with the default model:
// chat with a streamed reply, a real OS drag and drop of an image (refused
// in the composer for the text-only default model), reload, settings kept,
// two chats answering at once, a restart that keeps it all (the first chat
// going on from its cache on disk), a vision model
// (a tiny random Qwen2-VL put in the run's Hugging Face cache) loaded from
// the Models screen that answers about a dropped image, and back on the
// text-only model the same chat going on with its image left out; answers
// regenerated and a message edited kept as branches (‹ 2/3 ›), and an export.
// Screenshots of every screen go to screenshots/ (ignored by git).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  allByTestId, answerSaveDialog, byTestId, clickLoad, dropFile, modelReady, openApp, openPage, root, saveSettings, send, shot,
  startDriver, statusText, stopDriver, tempFolder, textOf, waitFor, writeTinyVisionModels,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-');
const hfHome = join(dataDir, 'hf');
let browser;

/** The tiny vision model's repository in the run's Hugging Face cache. */
const visionRepo = 'e2e/Tiny-Qwen2-VL';
/** One tiny model of each newer vision family, in the same cache. */
const familyRepos = [
  ['e2e/Tiny-Qwen3.5', 'qwen3_5'],
  ['e2e/Tiny-Qwen3-VL', 'qwen3_vl'],
  ['e2e/Tiny-Gemma-3', 'gemma3'],
  ['e2e/Tiny-Gemma-4', 'gemma4'],
];

function writeTinyVisionModel() {
  writeTinyVisionModels(hfHome, [[visionRepo, 'qwen2_vl'], ...familyRepos]);
}

/** An <img>'s picture has loaded with this width (it shows, not a broken icon). */
const imageLoaded = (b, el, width) => b.execute((e, w) => e.complete && e.naturalWidth === w, el, width);

/** Clicks the first element with this test id; again if the list was
 * redrawn under the click (a stale element). */
async function clickFirst(b, id) {
  await waitFor(b, `a ${id} to click`, async () => {
    try {
      const all = await allByTestId(b, id);
      if (all.length === 0) return false;
      await all[0].click();
      return true;
    } catch {
      return false;
    }
  }, 20_000);
}

async function lastAnswerText(b) {
  const answers = await allByTestId(b, 'msg-assistant');
  return answers.length ? answers[answers.length - 1].getText() : '';
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
    // Send's steps in the page came in order (ui/src/timeline.ts: what
    // scripts/bench-app-vs-api.sh prints)
    const marks = await browser.execute(() => window.__vlmTimeline?.marks ?? {});
    const steps = ['submit', 'invoke', 'chat-created', 'started', 'first-piece', 'first-draw'];
    for (const [i, step] of steps.entries()) {
      assert.ok(step in marks, `${step} marked: ${JSON.stringify(marks)}`);
      if (i > 0) assert.ok(marks[steps[i - 1]] <= marks[step], `${steps[i - 1]} before ${step}: ${JSON.stringify(marks)}`);
    }
  });

  it('takes an image dropped from another window, and keeps it from a model that cannot see it', async () => {
    const png = join(dataDir, 'red.png');
    execFileSync('convert', ['-size', '64x48', 'xc:#d33', png]);
    await dropFile(png);
    await waitFor(browser, 'the thumbnail', async () => (await allByTestId(browser, 'composer-thumb')).length === 1, 30_000);
    const img = await browser.$('[data-testid="composer-thumb"] img');
    await waitFor(browser, 'the thumbnail image to load', async () => browser.execute((el) => el.complete && el.naturalWidth === 64, img), 30_000);
    // the default model reads text only: the composer says so at once and
    // offers to find one that sees images; sending is refused before anything is stored
    await waitFor(browser, 'the offer of a vision model', async () => (await byTestId(browser, 'vision-offer')).isDisplayed(), 10_000);
    assert.match(await textOf(browser, await byTestId(browser, 'vision-offer')), /cannot see images/);
    assert.match(await textOf(browser, await byTestId(browser, 'composer-model')), /reads text only/);
    await send(browser, 'What colour is this?');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await allByTestId(browser, 'msg-user')).length, 1, 'the message with the image was not sent');
    assert.match(await (await byTestId(browser, 'composer-input')).getValue(), /What colour is this/, 'the text stays in the box');
    await shot(browser, '03-image-on-text-model');
    // removing the image lets the text go
    await (await byTestId(browser, 'remove-thumb')).click();
    await waitFor(browser, 'the offer to go', async () => !(await (await byTestId(browser, 'vision-offer')).isDisplayed()), 5_000);
    await (await byTestId(browser, 'composer-input')).click();
    await browser.keys(['Enter']);
    await waitFor(browser, 'the text-only message', async () => (await allByTestId(browser, 'msg-user')).length === 2);
    await waitFor(browser, 'its reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 2);
    assert.equal((await allByTestId(browser, 'reply-error')).length, 0);
  });

  it('finds the chat again after a reload', async () => {
    await browser.refresh();
    await waitFor(browser, 'the chat list', async () => (await allByTestId(browser, 'chat-item')).length === 1);
    await (await allByTestId(browser, 'chat-open'))[0].click();
    await waitFor(browser, 'the messages', async () => (await allByTestId(browser, 'msg-user')).length === 2);
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
    // read afresh until it says so: the page may draw the loaded model's card again between
    // finding it and reading it (a stale element under load, 2026-11-28)
    const loaded = async () => textOf(browser, await byTestId(browser, 'loaded-model'));
    await waitFor(browser, 'the loaded model on the Models page', async () => /SmolLM2|smollm/i.test(await loaded()), 20_000);
    await shot(browser, '06-models');
  });

  it('answers in two chats at once', async () => {
    // long answers, so the first is still running when the second starts
    // (counting repeats itself by design: no repetition penalty)
    await saveSettings(browser, { max_tokens: '160', repetition_penalty: '1' });
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

  it('keeps chats and settings across a restart', async () => {
    await browser.deleteSession();
    browser = await openApp();
    await modelReady(browser);
    await waitFor(browser, 'the chats', async () => (await allByTestId(browser, 'chat-item')).length === 3, 30_000);
    const items = await allByTestId(browser, 'chat-open');
    await items[items.length - 1].click(); // the oldest: the first chat
    await waitFor(browser, 'its messages', async () => (await allByTestId(browser, 'msg-user')).length === 2);
    await shot(browser, '08-after-restart');
    // The chat goes on where it was: what the model read of it comes back from disk.
    await send(browser, 'Thank you.');
    const lastStats = () => browser.execute(() => {
      const all = document.querySelectorAll('[data-testid="msg-assistant"] [data-testid="stats"]');
      return all.length === 3 ? all[2].textContent : null;
    });
    await waitFor(browser, 'the answer after the restart', async () => (await lastStats()) !== null && (await allByTestId(browser, 'msg-live')).length === 0);
    assert.match(await lastStats(), /reused \d+ tokens from disk/);
    await openPage(browser, 'nav-settings', 'setting-system_prompt');
    assert.equal(await (await byTestId(browser, 'setting-system_prompt')).getValue(), 'You are a helpful assistant.');
    await shot(browser, '09-settings-after-restart');
  });

  it('loads a vision model from the Models screen and answers about a dropped image', async () => {
    await openPage(browser, 'nav-models', 'local-models');
    // read inside the page in one step: the list redraws as the scan comes in
    const badge = (id) => browser.execute((i) => {
      const row = document.querySelector(`[data-testid="local-model"][data-model-id="${i}"]`);
      return row ? (row.querySelector('[data-testid="vision-badge"]')?.textContent.trim() ?? '') : null;
    }, id);
    await waitFor(browser, 'the vision model on disk', async () => (await badge(`hf:${visionRepo}`)) !== null, 20_000);
    // the Models screen says which models on disk can see images
    assert.equal(await badge(`hf:${visionRepo}`), 'Vision');
    assert.equal(await badge('dir:SmolLM2-135M-Instruct.Q4_1.gguf'), '', 'the built-in text model is listed, without the badge');
    await clickLoad(browser, `hf:${visionRepo}`);
    const loaded = async () => textOf(browser, await byTestId(browser, 'loaded-model'));
    // named by its repository, not by the snapshot folder (a commit hash) the engine loads from
    await waitFor(browser, 'the vision model to load', async () => (await loaded()).includes(visionRepo) && (await loaded()).includes('Vision'));
    assert.doesNotMatch(await loaded(), /e2e0{10}/);
    await waitFor(browser, 'its empty vision cache in the status bar', async () => {
      const text = await statusText(browser);
      return text.includes(visionRepo) && text.includes('images read 0 · reused 0');
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
    await waitFor(browser, 'a vision-cache miss', async () => (await statusText(browser)).includes('images read 1 · reused 0'), 20_000);
    await shot(browser, '11-vision-reply');

    // the image stays in the chat's history: the next turn sends it again, and
    // the engine takes its features from the cache (a hit, no second miss) and
    // the turn's start from the prefix cache
    await send(browser, 'Describe it in one word.');
    await waitFor(browser, 'the second reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 2 && (await allByTestId(browser, 'msg-live')).length === 0);
    assert.equal((await allByTestId(browser, 'reply-error')).length, 0);
    assert.equal((await allByTestId(browser, 'msg-image')).length, 1, 'the image shows once, with the first message');
    await waitFor(browser, 'a vision-cache hit', async () => (await statusText(browser)).includes('images read 1 · reused 1'), 20_000);
    assert.match(await statusText(browser), /cache reused [1-9]\d* tokens?/);
    await shot(browser, '12-vision-second-turn');
  });

  it('goes on with a chat that holds an image on a model that cannot see it', async () => {
    await openPage(browser, 'nav-models', 'local-models');
    await clickLoad(browser, 'dir:SmolLM2-135M-Instruct.Q4_1.gguf');
    // loaded, not loading ("Loading SmolLM2…" names it too)
    await waitFor(browser, 'the text model to load', async () => {
      const bar = await byTestId(browser, 'status-bar');
      return (await bar.getAttribute('data-engine')) === 'ready' && /^\W*SmolLM2/i.test(await statusText(browser));
    });
    await (await byTestId(browser, 'nav-chat')).click();
    await clickFirst(browser, 'chat-open'); // the vision chat: the most recent
    await waitFor(browser, 'its image', async () => (await allByTestId(browser, 'msg-image')).length === 1);
    // said once in the chat: the image is sent as a placeholder now
    await waitFor(browser, 'the note on the image', async () => (await allByTestId(browser, 'images-left-out')).length === 1, 10_000);
    await send(browser, 'Thanks. What is the capital of Italy?');
    await waitFor(browser, 'the third reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 3 && (await allByTestId(browser, 'msg-live')).length === 0);
    // the earlier image no longer fails every later turn
    assert.equal((await allByTestId(browser, 'reply-error')).length, 0);
    await shot(browser, '13-image-chat-on-text-model');
  });

  it('answers as JSON with the fields a chat asks for, shown formatted', async () => {
    await modelReady(browser);
    await (await byTestId(browser, 'new-chat')).click();
    await (await byTestId(browser, 'answer-format')).click();
    await (await byTestId(browser, 'answer-format-kind')).selectByAttribute('value', 'fields');
    await (await byTestId(browser, 'answer-format-fields')).setValue('city, country');
    await shot(browser, '14-answer-format-panel');
    await (await byTestId(browser, 'answer-format-apply')).click();
    await waitFor(browser, 'the format under the box', async () => /answers in JSON: city, country/.test(await textOf(browser, await byTestId(browser, 'composer-format'))), 10_000);
    await send(browser, 'Where is the Eiffel Tower?');
    await waitFor(browser, 'the JSON reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 1 && (await allByTestId(browser, 'msg-live')).length === 0);
    // shown as a formatted JSON block whose text parses, with exactly those keys
    const code = await browser.$('[data-testid="msg-assistant"] pre code');
    const answer = JSON.parse(await code.getText());
    assert.deepEqual(Object.keys(answer), ['city', 'country']);
    assert.equal(typeof answer.city, 'string');
    await shot(browser, '15-json-answer');
    // the chat keeps its format: reopened, the box still says so
    await (await byTestId(browser, 'new-chat')).click();
    assert.equal(await textOf(browser, await byTestId(browser, 'composer-format')), '');
    await clickFirst(browser, 'chat-open');
    await waitFor(browser, 'the format again', async () => /city, country/.test(await textOf(browser, await byTestId(browser, 'composer-format'))), 10_000);
  });

  it('keeps every answer and every version of a message as branches, and exports the chat', async () => {
    await modelReady(browser);
    await (await byTestId(browser, 'new-chat')).click();
    const settled = async (n) => (await allByTestId(browser, 'msg-assistant')).length === n && (await allByTestId(browser, 'msg-live')).length === 0;
    const position = async (el) => textOf(browser, await el.$('[data-testid="branch-position"]'));
    const lastAnswer = async () => (await allByTestId(browser, 'msg-assistant')).at(-1);
    await send(browser, 'Name a colour.');
    await waitFor(browser, 'the first answer', () => settled(1));
    // Regenerate twice: three answers, the newest shown as 3/3
    const ids = [await (await lastAnswer()).getAttribute('data-id')];
    for (const n of [2, 3]) {
      await clickFirst(browser, 'regenerate');
      await waitFor(browser, `answer ${n}`, async () => (await settled(1)) && (await position(await lastAnswer())) === `${n}/${n}`);
      ids.push(await (await lastAnswer()).getAttribute('data-id'));
    }
    assert.equal(new Set(ids).size, 3, `three stored answers: ${ids}`);
    // ‹ goes back through them, › forward again; each is the stored answer
    for (const [arrow, expected, id] of [['branch-prev', '2/3', ids[1]], ['branch-prev', '1/3', ids[0]], ['branch-next', '2/3', ids[1]]]) {
      await (await (await lastAnswer()).$(`[data-testid="${arrow}"]`)).click();
      await waitFor(browser, `answer ${expected}`, async () => (await position(await lastAnswer())) === expected, 10_000);
      assert.equal(await (await lastAnswer()).getAttribute('data-id'), id);
    }
    await shot(browser, '16-answer-branches');

    // go on from answer 2, then edit the first message: a new branch from the top.
    // What the chat showed stays drawn through the reply (issue 29: Send adds
    // the message and the reply, and draws nothing again while the prompt is read)
    const shown = await browser.execute(() => [...document.querySelectorAll('[data-testid=messages] > *')].map((e) => { e.e2eDrawnBefore = true; return e.dataset.id; }));
    await send(browser, 'And another one?');
    await waitFor(browser, 'the follow-up', () => settled(2));
    assert.deepEqual(await browser.execute(() => [...document.querySelectorAll('[data-testid=messages] > *')].filter((e) => e.e2eDrawnBefore).map((e) => e.dataset.id)), shown);
    const first = (await allByTestId(browser, 'msg-user'))[0];
    await browser.execute((e) => e.click(), await first.$('[data-testid="edit-message"]'));
    assert.match(await textOf(browser, await byTestId(browser, 'edit-banner-text')), /earlier message: sending starts a new branch/);
    await send(browser, 'Name a fruit.');
    await waitFor(browser, 'the edited branch', async () => (await settled(1)) && (await allByTestId(browser, 'msg-user')).length === 1);
    const edited = (await allByTestId(browser, 'msg-user'))[0];
    assert.equal(await position(edited), '2/2');
    assert.match(await textOf(browser, edited), /Name a fruit/);
    // the old version is still there, with its answer 2 and follow-up
    await (await edited.$('[data-testid="branch-prev"]')).click();
    await waitFor(browser, 'the old branch', async () => (await allByTestId(browser, 'msg-user')).length === 2, 10_000);
    assert.equal(await (await allByTestId(browser, 'msg-assistant'))[0].getAttribute('data-id'), ids[1]);
    await shot(browser, '17-edit-branches');

    // Export asks where, in the system's save dialog, offering the chat's title
    await (await byTestId(browser, 'export-chat')).click();
    const folder = join(dataDir, 'saved exports', 'Colours chat');
    mkdirSync(dirname(folder), { recursive: true });
    await answerSaveDialog(browser, 'Export the chat to a new folder', folder);
    await waitFor(browser, 'the export', async () => {
      for (const toast of await allByTestId(browser, 'toast')) if ((await textOf(browser, toast)).startsWith(`Exported to ${folder}`)) return true;
      return false;
    }, 20_000);
    // the toast is not over the message box's Send button
    const [toastBox, sendBox] = await browser.execute(() => [document.querySelector('[data-testid=toast]'), document.querySelector('[data-testid=send]')]
      .map((e) => { const r = e.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; }));
    assert.ok(toastBox.bottom <= sendBox.top || toastBox.top >= sendBox.bottom || toastBox.right <= sendBox.left || toastBox.left >= sendBox.right, 'the toast leaves Send free');
    await shot(browser, '17b-exported');
    const markdown = readFileSync(join(folder, 'chat.md'), 'utf8');
    assert.match(markdown, /## You\n\nName a colour\.\n[\s\S]*## You\n\nAnd another one\?/);
    const file = JSON.parse(readFileSync(join(folder, 'chat.json'), 'utf8'));
    assert.equal(file.messages.filter((m) => m.role === 'assistant').length, 5, 'three answers, the follow-up, the fruit');
  });

  it('loads each vision family from the Hugging Face cache and answers a dropped image', async () => {
    for (const [repo] of familyRepos) {
      await openPage(browser, 'nav-models', 'local-models');
      // The list redraws as the cache scan and load state come in, so the
      // row is read and clicked inside the page in one step (never a stale
      // element held across a redraw).
      const row = `[data-testid="local-model"][data-model-id="hf:${repo}"]`;
      const badge = () => browser.execute((s) => document.querySelector(`${s} [data-testid="vision-badge"]`)?.textContent.trim() ?? null, row);
      await waitFor(browser, `${repo} on disk`, async () => (await badge()) !== null, 20_000);
      assert.equal(await badge(), 'Vision', repo);
      await clickLoad(browser, `hf:${repo}`);
      const loaded = async () => textOf(browser, await byTestId(browser, 'loaded-model'));
      await waitFor(browser, `${repo} to load`, async () => (await loaded()).includes(repo) && (await loaded()).includes('Vision'));
      await (await byTestId(browser, 'nav-chat')).click();
      await (await byTestId(browser, 'new-chat')).click();
      await dropFile(join(root, 'crates/engine/tests/fixtures/images/qwen_parity_320x240.png'));
      await waitFor(browser, 'the thumbnail', async () => (await allByTestId(browser, 'composer-thumb')).length === 1, 30_000);
      await send(browser, 'What is in this picture?');
      await waitFor(browser, `${repo}'s reply`, async () => (await allByTestId(browser, 'msg-assistant')).length === 1 && (await allByTestId(browser, 'msg-live')).length === 0);
      assert.equal((await allByTestId(browser, 'reply-error')).length, 0, `${repo} answers without an error`);
      const model = await browser.execute(() => document.querySelector('[data-testid="msg-assistant"] .msg-model')?.textContent.trim());
      assert.equal(model, repo);
    }
    await shot(browser, '18-vision-family-reply');
    // the picture sent opens larger on a click; Escape closes it
    await (await byTestId(browser, 'msg-image-open')).click();
    await waitFor(browser, 'the larger picture', async () => (await byTestId(browser, 'image-viewer')).isDisplayed(), 5_000);
    const [shown, page] = await browser.execute(() => [document.querySelector('[data-testid="image-viewer"] img').getBoundingClientRect().width, document.querySelector('[data-testid="msg-image"]').getBoundingClientRect().width]);
    assert.ok(shown > page, `larger: ${shown} > ${page}`);
    await shot(browser, '18b-image-viewer');
    await browser.keys(['Escape']);
    await waitFor(browser, 'the viewer to close', async () => !(await (await byTestId(browser, 'image-viewer')).isExisting()), 5_000);
  });
});

writeFileSync(join(dataDir, 'README'), 'data folder of one end-to-end run\n');
