// A chat's own settings in the real window: the Chat settings dialog saves
// a system prompt and an answer length for one chat; they show again when
// the dialog reopens and after the app restarts, the stored chat holds them,
// and the next answer runs under them (its length is cut at the chat's
// limit, its prompt grows by the system prompt). A preset saved from the
// dialog starts a new chat with the same settings.
//
// Everything is read inside the page in one step (browser.execute): the chat
// and its list redraw as replies arrive, so an element handle held across a
// redraw would go stale.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  byTestId, modelReady, openApp, saveSettings, send, shot, startDriver, stopDriver, tempFolder, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-chat-settings-');
let browser;

// Longer than any default system prompt, so a prompt with it is visibly longer.
const SYSTEM_PROMPT = 'You are a careful assistant for sailors. Answer every question about the sea, the weather and the stars in '
  + 'plain words, name your sources when you have them, and say so when you do not know something for certain.';
const CHAT_MAX_TOKENS = 3;

/** The stored chats, as the app's own list_chats command returns them. */
const storedChats = () => browser.execute(() => window.__TAURI_INTERNALS__.invoke('list_chats', { query: null }));

/** The shown replies' figures (the stats line under each answer) and whether one is still streaming. */
const replies = () => browser.execute(() => ({
  live: document.querySelectorAll('[data-testid="msg-live"]').length,
  stats: [...document.querySelectorAll('[data-testid="msg-assistant"]')].map((m) => m.querySelector('[data-testid="stats"]')?.textContent ?? ''),
}));

const number = (stats, re) => Number((stats.match(re) ?? [])[1]);

/** Waits until `count` replies show, all finished, the last one not `previous` (a regenerated answer replaces it). */
async function waitForReplies(count, previous = null) {
  await waitFor(browser, `${count} finished replies`, async () => {
    const r = await replies();
    return r.live === 0 && r.stats.length === count && r.stats.every((s) => /ended:/.test(s)) && r.stats[count - 1] !== previous;
  });
  return (await replies()).stats;
}

/** Opens the open chat's settings dialog and reads its fields. */
async function openDialog() {
  await (await byTestId(browser, 'open-chat-settings')).click();
  await (await byTestId(browser, 'chat-settings-dialog')).waitForExist({ timeout: 10_000 });
  return browser.execute(() => ({
    system_prompt: document.querySelector('[data-testid="chat-setting-system_prompt"]').value,
    max_tokens: document.querySelector('[data-testid="chat-setting-max_tokens"]').value,
    presets: [...document.querySelectorAll('[data-testid="preset-select"] option')].map((o) => o.textContent),
  }));
}

async function closeDialog(button) {
  await (await byTestId(browser, button)).click();
  await waitFor(browser, 'the dialog to close', async () => !(await (await byTestId(browser, 'chat-settings-dialog')).isExisting()), 10_000);
}

describe('per-chat settings', () => {
  before(async () => {
    await startDriver({ VLM_DATA_DIR: dataDir });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('saves a chat’s system prompt and answer length, keeps them across a restart, and starts a chat from a preset', async () => {
    await modelReady(browser);
    // greedy and short, so the two turns compare and finish quickly
    await saveSettings(browser, { temperature: '0', max_tokens: '12' });
    await (await byTestId(browser, 'nav-chat')).click();

    // a first answer under the app's settings
    await send(browser, 'What is the tide?');
    const [first] = await waitForReplies(1);
    const promptBefore = number(first, /prompt (\d+) tokens/);
    assert.ok(promptBefore > 0, first);
    assert.ok(number(first, /(\d+) tokens ·/) > CHAT_MAX_TOKENS, `the app's limit (12) lets it run past ${CHAT_MAX_TOKENS}: ${first}`);

    // the chat's own system prompt and limit, saved from the dialog
    const empty = await openDialog();
    assert.equal(empty.system_prompt, '');
    assert.equal(empty.max_tokens, '');
    await (await byTestId(browser, 'chat-setting-system_prompt')).setValue(SYSTEM_PROMPT);
    await (await byTestId(browser, 'chat-setting-max_tokens')).setValue(String(CHAT_MAX_TOKENS));
    // … also kept as a preset
    await (await byTestId(browser, 'preset-name')).setValue('Sailors');
    await (await byTestId(browser, 'preset-save')).click();
    await waitFor(browser, 'the preset saved', () => browser.execute(
      () => [...document.querySelectorAll('[data-testid="toast"]')].some((t) => t.textContent.includes('Sailors'))), 10_000);
    await shot(browser, 'chat-settings-01-dialog');
    await closeDialog('chat-settings-save');
    await waitFor(browser, 'the header to mark the chat’s own settings', () => browser.execute(
      () => document.querySelector('[data-testid="open-chat-settings"]')?.textContent === 'Chat settings •'), 10_000);

    // the store holds them
    const [stored] = await storedChats();
    assert.deepEqual(stored.settings, { system_prompt: SYSTEM_PROMPT, max_tokens: CHAT_MAX_TOKENS });

    // the dialog shows them again
    const reopened = await openDialog();
    assert.equal(reopened.system_prompt, SYSTEM_PROMPT);
    assert.equal(reopened.max_tokens, String(CHAT_MAX_TOKENS));
    assert.ok(reopened.presets.includes('Sailors'), `presets: ${reopened.presets}`);
    await closeDialog('chat-settings-cancel');

    // the next answer runs under them: cut at the chat's limit, its prompt
    // longer by the system prompt than the same conversation's first one
    await browser.execute(() => document.querySelector('[data-testid="regenerate"]').click());
    const [underChat] = await waitForReplies(1, first);
    assert.equal(number(underChat, /(\d+) tokens ·/), CHAT_MAX_TOKENS, underChat);
    assert.match(underChat, /ended: length/);
    assert.ok(number(underChat, /prompt (\d+) tokens/) > promptBefore + 20, `with the system prompt: ${underChat}; without: ${first}`);
    await shot(browser, 'chat-settings-02-reply-under-chat-settings');

    // a new chat from the preset has the same settings
    await waitFor(browser, 'the preset in the sidebar', () => browser.execute(
      () => [...document.querySelectorAll('[data-testid="new-from-preset"] option')].some((o) => o.textContent === 'Sailors')), 10_000);
    await (await byTestId(browser, 'new-from-preset')).selectByVisibleText('Sailors');
    await waitFor(browser, 'the second chat', async () => (await storedChats()).length === 2, 10_000);
    const fromPreset = (await storedChats()).find((c) => c.id !== stored.id);
    assert.deepEqual(fromPreset.settings, { system_prompt: SYSTEM_PROMPT, max_tokens: CHAT_MAX_TOKENS });
    const shown = await openDialog();
    assert.equal(shown.system_prompt, SYSTEM_PROMPT);
    assert.equal(shown.max_tokens, String(CHAT_MAX_TOKENS));
    await closeDialog('chat-settings-cancel');
    await send(browser, 'What is the tide?');
    const [presetReply] = await waitForReplies(1);
    assert.equal(number(presetReply, /(\d+) tokens ·/), CHAT_MAX_TOKENS, presetReply);
    await shot(browser, 'chat-settings-03-chat-from-preset');

    // after a restart, the first chat's dialog still shows its settings
    await browser.deleteSession().catch(() => {});
    browser = await openApp();
    await modelReady(browser);
    const firstItem = `[data-testid="chat-item"][data-chat-id="${stored.id}"]`;
    await waitFor(browser, 'the first chat in the list', () => browser.execute((s) => {
      const item = document.querySelector(s);
      if (!item) return false;
      item.querySelector('.chat-open').click();
      return true;
    }, firstItem), 30_000);
    await waitFor(browser, 'its reply', async () => (await replies()).stats.length === 1, 20_000);
    const afterRestart = await openDialog();
    assert.equal(afterRestart.system_prompt, SYSTEM_PROMPT);
    assert.equal(afterRestart.max_tokens, String(CHAT_MAX_TOKENS));
    await shot(browser, 'chat-settings-04-after-restart');
    await closeDialog('chat-settings-cancel');
  });
});
