// The app killed (kill -9) in the middle of a reply, then started again on
// the same data folder: the chat is there with the part of the reply that
// was saved while it streamed (the app saves every second), marked as
// stopped before its end.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  allByTestId, appPids, byTestId, modelReady, openApp, saveSettings, shot, startDriver, stopDriver, tempFolder,
  textOf, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-crash-');
let browser;

/** Letters and digits only: the rendered Markdown's line breaks and spacing aside. */
const bare = (text) => text.replace(/\s+/g, '');

describe('the app killed mid-reply', () => {
  before(async () => {
    await startDriver({ VLM_DATA_DIR: dataDir });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('keeps the partial reply, marked interrupted, after kill -9 and a restart', async () => {
    await modelReady(browser);
    // greedy and long: the built-in model tells this story past 900 tokens
    // (a count stops at "20. 20" after 122 tokens, as mlx-lm's greedy does,
    // which a fast machine streams before the kill)
    await saveSettings(browser, { temperature: '0', max_tokens: '2000', repetition_penalty: '1' });
    await (await byTestId(browser, 'nav-chat')).click();

    const input = await byTestId(browser, 'composer-input');
    await input.click();
    await input.setValue('Write a very long story about a dragon who learns to count.');
    await browser.keys(['Enter']);
    // read in the page in one step: the live reply is re-rendered with every token
    const liveText = () => browser.execute(
      () => document.querySelector('[data-testid="msg-live"] [data-testid="answer"]')?.textContent ?? '');
    await waitFor(browser, 'the reply to stream', async () => bare(await liveText()).length >= 20);
    // past the app's next save of the reply under way
    await new Promise((r) => setTimeout(r, 2500));
    assert.equal((await allByTestId(browser, 'msg-live')).length, 1, 'still answering when killed');
    await shot(browser, 'crash-01-before-kill');

    const pids = appPids();
    assert.ok(pids.length >= 1, 'the app process is found');
    // the last thing before the kill: a save (every second) can still land
    // between this read and the signal, so the saved reply may run a few
    // tokens past what was on screen
    const seen = await liveText();
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    await browser.deleteSession().catch(() => {}); // its app is gone

    browser = await openApp();
    await modelReady(browser);
    // after a restart the header names the model the status bar names (issue 29: "No model loaded")
    const pill = await textOf(browser, await byTestId(browser, 'model-pill'));
    const bar = await textOf(browser, await byTestId(browser, 'status-bar'));
    assert.ok(pill !== 'No model loaded' && bar.includes(pill), `header "${pill}", status bar "${bar}"`);
    await waitFor(browser, 'the chat', async () => (await allByTestId(browser, 'chat-item')).length === 1, 30_000);
    await (await allByTestId(browser, 'chat-item'))[0].click();
    await waitFor(browser, 'the saved reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 1);
    const reply = (await allByTestId(browser, 'msg-assistant'))[0];
    const saved = await textOf(browser, await reply.$('[data-testid="answer"]'));
    assert.ok(bare(saved).length > 0, 'some of the reply was saved');
    // what was saved is the reply that streamed: one of the two texts starts the other
    // (seen ran past the last save, or a last save ran past seen)
    assert.ok(bare(seen).startsWith(bare(saved)) || bare(saved).startsWith(bare(seen)),
      `saved ${JSON.stringify(saved)} and shown ${JSON.stringify(seen)} are not the same reply`);
    assert.equal(await textOf(browser, await reply.$('.note')), 'Stopped before the end.');
    assert.equal((await allByTestId(browser, 'msg-live')).length, 0, 'nothing is answering after the restart');
    assert.match(await textOf(browser, (await allByTestId(browser, 'msg-user'))[0]), /a dragon who learns to count/);
    console.log(`kill -9 with ${bare(seen).length} characters on screen; ${bare(saved).length} came back after the restart`);
    await shot(browser, 'crash-02-after-restart');
  });
});
