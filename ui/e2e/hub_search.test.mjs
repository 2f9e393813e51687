// Search → fit check → download → load → chat, in the real window under
// Xvfb, against the fake Hugging Face Hub of `hub::testing` run as a process
// (src-tauri/examples/fake_hub.rs, HF_ENDPOINT): a result the engine runs
// with its fit verdict, one it lacks with the reason, the download of the
// first by its `hf:` id, the downloaded model answering, and its load
// settings remembered and used for its reload. Elements are
// read and clicked inside the page (browser.execute): the result list
// redraws as the fit check and download progress come in.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import {
  allByTestId, axeAudit, byTestId, openApp, openPage, root, send, shot, startDriver, stopDriver, tempFolder, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-hub-');
const TINY = 'test-org/tiny-llama';
let browser;
let fakeHub;

/** Starts the fake Hub example and resolves with its endpoint. */
function startFakeHub() {
  const binary = process.env.VLM_FAKE_HUB ?? join(root, 'target/debug/examples/fake_hub');
  fakeHub = spawn(binary, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    fakeHub.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0].trim());
    });
    fakeHub.on('exit', (code) => reject(new Error(`${binary} ended (${code}) before it served (built by cargo build --workspace --all-targets)`)));
  });
}

/** What a result card says, read inside the page in one step. */
const card = (b, repo) => b.execute((r) => {
  const el = document.querySelector(`[data-testid="hub-result"][data-repo="${r}"]`);
  if (!el) return null;
  const text = (id) => el.querySelector(`[data-testid="${id}"]`)?.textContent ?? null;
  return {
    supported: text('hub-supported'), reason: text('hub-unsupported-reason'), meta: text('hub-meta'),
    fit: el.querySelector('[data-testid="fit"]')?.getAttribute('data-level') ?? null, fitText: text('fit'),
    downloads: el.querySelectorAll('[data-testid="hub-download"]').length, downloaded: text('hub-downloaded'),
    error: text('download-error'),
  };
}, repo);

describe('search the Hub, download, load and chat', () => {
  before(async () => {
    const endpoint = await startFakeHub();
    await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: join(dataDir, 'hf'), HF_ENDPOINT: endpoint, HF_HUB_DISABLE_IMPLICIT_TOKEN: '1' });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    fakeHub?.stdin.end();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('finds a model, says whether it runs and fits, downloads it, loads it and chats', async () => {
    await openPage(browser, 'nav-models', 'hub-search-input');
    await (await byTestId(browser, 'hub-search-input')).setValue('e');
    await browser.execute(() => document.querySelector('[data-testid="hub-search-button"]').click());

    await waitFor(browser, 'the fit verdict of the tiny model', async () => (await card(browser, TINY))?.fit != null, 60_000);
    const tiny = await card(browser, TINY);
    assert.equal(tiny.supported, 'Runs here · Llama');
    assert.match(tiny.meta, /↓ 900 · ♥ 12 · license mit/);
    assert.equal(tiny.fit, 'green', tiny.fitText);
    assert.match(tiny.fitText, /needs about .* = weights .* \+ KV cache .* at [\d,]+ tokens/);
    assert.match(tiny.fitText, /largest context that fits: [\d,]+ tokens/);
    const mamba = await card(browser, 'someone/mamba-130m');
    assert.match(mamba.reason, /no model family for the mamba architecture/);
    assert.equal(mamba.downloads, 0, 'an unsupported model offers no download');
    await shot(browser, '60-hub-search');
    const serious = await axeAudit(browser, 'hub-search');
    assert.deepEqual(serious, [], `axe: serious or critical violations on the search results: ${JSON.stringify(serious, null, 1)}`);

    await browser.execute((r) => document.querySelector(`[data-testid="hub-result"][data-repo="${r}"] [data-testid="hub-download"]`).click(), TINY);
    await waitFor(browser, 'the download to finish', async () => {
      const c = await card(browser, TINY);
      if (c?.error) throw new Error(`the download failed: ${c.error}`);
      return c?.downloaded != null;
    }, 60_000);

    // on disk now, with its own fit verdict before Load
    await waitFor(browser, 'the model on disk with its fit', () => browser.execute((id) =>
      document.querySelector(`[data-testid="local-model"][data-model-id="${id}"] [data-testid="fit"]`) != null, `hf:${TINY}`), 30_000);
    // clicked once, inside the page; done when the Loaded card names it
    // (the list redraws under held handles, and an answer to the click's
    // execute can be lost while the load is already under way)
    await waitFor(browser, 'Load to be clicked', () => browser.execute((id, repo) => {
      const card = document.querySelector('[data-testid="loaded-model"]')?.textContent ?? '';
      if (card.includes(repo)) return !card.includes('Loading');
      const button = document.querySelector(`[data-testid="local-model"][data-model-id="${id}"] [data-testid="load-model"]`);
      if (button && !button.disabled && !window.hubLoadClicked) {
        window.hubLoadClicked = true;
        button.click();
      }
      return false;
    }, `hf:${TINY}`, TINY), 60_000).catch(async (e) => { await shot(browser, 'failed-hub-load'); throw e; });
    await shot(browser, '61-hub-downloaded-loaded');

    await (await byTestId(browser, 'nav-chat')).click();
    await (await byTestId(browser, 'new-chat')).click();
    await send(browser, 'Hello there');
    await waitFor(browser, 'its answer', async () =>
      (await allByTestId(browser, 'msg-assistant')).length === 1 && (await allByTestId(browser, 'msg-live')).length === 0, 60_000);
    const answer = await browser.execute(() => document.querySelector('[data-testid="msg-assistant"] [data-testid="answer"]')?.textContent ?? '');
    assert.ok(answer.trim().length > 0, 'the downloaded model answered');
    await shot(browser, '62-hub-model-answers');
  });

  it('remembers the loaded model\'s load settings, with the fit for them, and reloads it with them', async () => {
    const id = `hf:${TINY}`;
    await openPage(browser, 'nav-models', 'local-models');
    await waitFor(browser, 'its Load settings button', () => browser.execute((i) => {
      const button = document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="load-settings"]`);
      button?.click();
      return button != null;
    }, id), 20_000);
    await waitFor(browser, 'the dialog with its fit verdict', () => browser.execute(() =>
      document.querySelector('[data-testid="load-settings-dialog"] [data-testid="fit"]') != null), 30_000);
    // two running sequences, KV at 8 bits: the verdict (one chat's) is asked
    // again, and its worst case counts both
    await browser.execute(() => {
      const running = document.querySelector('[data-testid="load-setting-max_running"]');
      running.value = '2';
      running.dispatchEvent(new Event('input'));
      const kv = document.querySelector('[data-testid="load-setting-kv_bits"]');
      kv.value = '8';
      kv.dispatchEvent(new Event('change'));
      // and replies sped up by prompt lookup (speculative decoding)
      const speed = document.querySelector('[data-testid="load-setting-speed_up"]');
      speed.value = 'prompt_lookup';
      speed.dispatchEvent(new Event('change'));
    });
    await waitFor(browser, 'the fit for two sequences', () => browser.execute(() =>
      /At most, 2 answers at once/.test(document.querySelector('[data-testid="load-settings-dialog"] [data-testid="fit"]')?.textContent ?? '')), 30_000);
    const fitText = await browser.execute(() => document.querySelector('[data-testid="load-settings-dialog"] [data-testid="fit"]').textContent);
    assert.match(fitText, /a chat needs about .* KV cache .* at [\d,]+ tokens \(8-bit\)/);
    assert.match(fitText, /At most, 2 answers at once at [\d,]+ tokens each: about [\d.]+ [MG]B \((fits|tight)\)/);
    await shot(browser, '63-load-settings');
    const serious = await axeAudit(browser, 'load-settings');
    assert.deepEqual(serious, [], `axe: serious or critical violations in the load settings dialog: ${JSON.stringify(serious, null, 1)}`);

    const save = await browser.execute(() => document.querySelector('[data-testid="load-settings-save"]').textContent);
    assert.equal(save, 'Save and reload', 'the model is loaded: saving reloads it');
    await browser.execute(() => document.querySelector('[data-testid="load-settings-save"]').click());
    await waitFor(browser, 'the row to name its own settings', () => browser.execute((i) =>
      document.querySelector(`[data-testid="local-model"][data-model-id="${i}"] [data-testid="own-load-settings"]`)?.textContent ?? '', id)
      .then((t) => t.includes('KV 8-bit · 2 at once · prompt lookup')), 60_000);
    await waitFor(browser, 'the model loaded again', () => browser.execute((repo) => {
      const card = document.querySelector('[data-testid="loaded-model"]')?.textContent ?? '';
      return card.includes(repo) && !card.includes('Loading');
    }, TINY), 60_000);
    await shot(browser, '64-load-settings-saved');
  });
});
