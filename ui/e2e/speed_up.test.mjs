// "Speed up replies" beyond prompt lookup, in the real window under Xvfb: a
// tiny Qwen3.5 whose checkpoint ships MTP heads carries the "MTP heads"
// badge and is offered its own heads; a tiny llama is offered the draft
// model written with it (same tokenizer) and not the Qwen3.5 (recurrent
// layers, named in the note with why); with the draft chosen it loads, answers
// and the status bar shows how many drafts were kept, and after the chat's
// next turn, that the draft read the first prompt from its own cache. The tiny models come
// from the fixtures example `write_tiny_model` (built by `cargo test
// --all-targets`), put in the run's Hugging Face cache.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  allByTestId, axeAudit, modelReady, openApp, openPage, root, send, shot, startDriver, statusText, stopDriver, tempFolder, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-speed-');
const hfHome = join(dataDir, 'hf');
const TARGET = 'e2e/tiny-target';
const DRAFT = 'e2e/tiny-draft';
const MTP = 'e2e/tiny-qwen35-mtp';
let browser;

/** Writes `folder` into the Hugging Face cache as repository `repo`. */
function cache(folder, repo) {
  const at = join(hfHome, 'hub', `models--${repo.replace('/', '--')}`);
  const commit = 'e2e'.padEnd(40, '0');
  cpSync(folder, join(at, 'snapshots', commit), { recursive: true });
  mkdirSync(join(at, 'refs'), { recursive: true });
  writeFileSync(join(at, 'refs', 'main'), commit);
}

function writeModels() {
  const writer = process.env.VLM_TINY_WRITER ?? join(root, 'target/debug/examples/write_tiny_model');
  const pair = tempFolder('vlm-e2e-pair-');
  execFileSync(writer, ['--speculative-pair', pair]);
  cache(join(pair, 'target'), TARGET);
  cache(join(pair, 'draft'), DRAFT);
  const mtp = tempFolder('vlm-e2e-mtp-');
  execFileSync(writer, ['--mtp-target', mtp]);
  cache(join(mtp, 'target'), MTP);
}

/** Opens the Load settings of model `id` and waits for its fit verdict. */
async function openLoadSettings(b, id) {
  await openPage(b, 'nav-models', 'local-models');
  await waitFor(b, `${id}'s Load settings button`, () => b.execute((i) => {
    const button = document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="load-settings"]`);
    button?.click();
    return button != null;
  }, id), 30_000);
  await waitFor(b, 'the dialog with its fit verdict', () => b.execute(() =>
    document.querySelector('[data-testid="load-settings-dialog"] [data-testid="fit"]') != null), 30_000);
}

/** The dialog's "Speed up replies" choices and notes, read in the page. */
const speedUp = (b) => b.execute(() => {
  const select = document.querySelector('[data-testid="load-setting-speed_up"]');
  return {
    options: [...select.options].map((o) => [o.value, o.textContent]),
    hint: document.querySelector('[data-testid="speed-up-hint"]')?.textContent ?? null,
    note: document.querySelector('[data-testid="draft-models-note"]')?.textContent ?? null,
  };
});

describe('speed up replies with MTP heads or a draft model', () => {
  before(async () => {
    writeModels();
    await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: hfHome, HF_ENDPOINT: 'http://127.0.0.1:9', HF_HUB_DISABLE_IMPLICIT_TOKEN: '1' });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('offers a checkpoint its own MTP heads, and marks it in the gallery', async () => {
    await openPage(browser, 'nav-models', 'local-models');
    await waitFor(browser, 'the MTP badge', () => browser.execute((i) =>
      document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="mtp-badge"]`) != null, `hf:${MTP}`), 30_000);
    const badged = await browser.execute(() => [...document.querySelectorAll('[data-testid="local-model"]')]
      .filter((r) => r.querySelector('[data-testid="mtp-badge"]')).map((r) => r.dataset.modelId));
    assert.deepEqual(badged, [`hf:${MTP}`], 'only the checkpoint with mtp.* tensors is marked');
    await shot(browser, '90-gallery-mtp-badge');

    await openLoadSettings(browser, `hf:${MTP}`);
    const mtp = await speedUp(browser);
    assert.ok(mtp.options.some(([v, label]) => v === 'mtp' && label === 'Its own MTP heads'), JSON.stringify(mtp.options));
    await browser.execute(() => {
      const select = document.querySelector('[data-testid="load-setting-speed_up"]');
      select.value = 'mtp';
      select.dispatchEvent(new Event('change'));
    });
    const chosen = await speedUp(browser);
    assert.match(chosen.hint, /multi-token-prediction heads/);
    await shot(browser, '91-load-settings-mtp');
    await browser.execute(() => document.querySelector('[data-testid="load-settings-cancel"]').click());
  });

  it('lists only a compatible draft model, says why others are not, and drafts with it', async () => {
    await openLoadSettings(browser, `hf:${TARGET}`);
    const target = await speedUp(browser);
    const values = target.options.map(([v]) => v);
    assert.ok(!values.includes('mtp'), 'no MTP heads in the llama checkpoint');
    assert.ok(values.includes(`draft:hf:${DRAFT}`), JSON.stringify(target.options));
    // a recurrent model may draft, but this one's vocabulary is another
    assert.ok(!values.includes(`draft:hf:${MTP}`), 'another vocabulary cannot draft');
    assert.match(target.note, new RegExp(`${MTP}: another vocabulary`));
    await browser.execute((v) => {
      const select = document.querySelector('[data-testid="load-setting-speed_up"]');
      select.value = v;
      select.dispatchEvent(new Event('change'));
    }, `draft:hf:${DRAFT}`);
    // the reasons sit behind "Why … cannot draft for it": opened for the picture
    await browser.execute(() => { document.querySelector('[data-testid="draft-models-note"]').open = true; });
    await waitFor(browser, 'the draft chosen and the reasons shown', () => browser.execute((v) =>
      document.querySelector('[data-testid="load-setting-speed_up"]').value === v
        && document.querySelector('[data-testid="draft-models-note"]').open
        && /same vocabulary/.test(document.querySelector('[data-testid="speed-up-hint"]').textContent), `draft:hf:${DRAFT}`), 10_000);
    await browser.pause(300); // one paint before the picture
    await shot(browser, '92-load-settings-draft-model');
    const serious = await axeAudit(browser, 'load-settings-speed-up');
    assert.deepEqual(serious, [], `axe: serious or critical violations: ${JSON.stringify(serious, null, 1)}`);
    await browser.execute(() => document.querySelector('[data-testid="load-settings-save"]').click());
    await waitFor(browser, 'the row to name its draft', () => browser.execute((i) =>
      document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="own-load-settings"]`)?.textContent ?? '', `hf:${TARGET}`)
      .then((t) => t.includes(`draft model ${DRAFT}`)), 30_000);

    await waitFor(browser, 'its Load button', () => browser.execute((i) => {
      const button = document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="load-model"]`);
      button?.click();
      return button != null;
    }, `hf:${TARGET}`), 30_000);
    await modelReady(browser);
    await (await browser.$('[data-testid="nav-chat"]')).click();
    await (await browser.$('[data-testid="new-chat"]')).click();
    await send(browser, 'one two three one two three one two three one two');
    await waitFor(browser, 'the answer', async () =>
      (await allByTestId(browser, 'msg-assistant')).length === 1 && (await allByTestId(browser, 'msg-live')).length === 0, 60_000);
    await waitFor(browser, 'the acceptance in the status bar', async () => /drafts kept \d+% · [\d.]+ tokens\/pass/.test(await statusText(browser)), 20_000);
    await shot(browser, '93-status-bar-drafts');

    // the next turn starts with the first one's prompt: the draft reads it from its own cache
    await send(browser, 'one two three one two three again');
    await waitFor(browser, 'the second answer', async () =>
      (await allByTestId(browser, 'msg-assistant')).length === 2 && (await allByTestId(browser, 'msg-live')).length === 0, 60_000);
    await waitFor(browser, "the draft's cache hit in the status bar", async () =>
      /draft cache [1-9]\d* hits?, reused [1-9]\d* tokens? · \d+ kept, [\d.]+ [KMG]?B/.test(await statusText(browser)), 20_000);
    await shot(browser, '94-status-bar-draft-cache');
  });
});
