// Settings → Split models across machines in the real window: turned on,
// two hosts (this Mac first) and "Pipeline" chosen as how to split, it saves
// (a list of one host is refused with the reason), the rank lines say what
// each Mac is to do (the other one's command carries the same --split and
// names the hostfile and the ring secret, which the line says how to copy
// there), and the values come back when Settings reopens and after the app
// restarts, with the same ring secret, readable by this user alone. No
// ring is joined: nothing is loaded (the split itself runs in
// src-tauri/tests/app_tests/cluster.rs with a second process as rank 1).
//
// Values are set inside the page (browser.execute), not typed: WebKitWebDriver
// drops typed keys under load (see desktop.test.mjs).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  appPids, byTestId, openApp, openPage, shot, startDriver, stopDriver, tempFolder, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-cluster-');
const hfHome = join(dataDir, 'hf');
mkdirSync(hfHome, { recursive: true });
const HOSTS = ['192.168.1.10:5000', '192.168.1.11:5000'];
const SECRET_FILE = join(dataDir, 'cluster-ring.secret');
let browser;

/** The section's fields and lines as the page shows them now. */
const shown = () => browser.execute(() => {
  const q = (id) => document.querySelector(`[data-testid="${id}"]`);
  return {
    enabled: q('setting-cluster-enabled')?.checked ?? null,
    hosts: q('setting-cluster-hosts')?.value ?? null,
    split: q('setting-cluster-split')?.value ?? null,
    splitLabel: q('setting-cluster-split')?.selectedOptions[0]?.textContent ?? null,
    splitHint: document.getElementById('cluster-split-hint')?.textContent ?? '',
    enabledHint: document.getElementById('cluster-enabled-hint')?.textContent ?? '',
    ranks: [...document.querySelectorAll('[data-testid="cluster-ranks"] li')].map((li) => ({
      text: li.querySelector('[data-testid="cluster-rank-text"]')?.textContent ?? '',
      command: li.querySelector('[data-testid="cluster-rank-command"]')?.textContent ?? null,
      copy: li.querySelector('[data-testid="cluster-rank-copy"]')?.textContent ?? null,
    })),
    saved: q('settings-saved')?.textContent ?? '',
  };
});

/** The settings as the app stored them (its own get_settings command). */
const stored = () => browser.execute(() => window.__TAURI_INTERNALS__.invoke('get_settings').then((v) => v.settings.cluster));

/** Waits until the model the app loads at start has loaded or failed (the
 * Settings page is drawn again when it comes in), the same for a second. */
async function engineSettled() {
  let quietSince = 0;
  await waitFor(browser, 'the start-up load to end', async () => {
    const state = await browser.execute(() => window.__TAURI_INTERNALS__.invoke('engine_status').then((s) => s.state));
    if (state === 'loading') quietSince = 0;
    else quietSince ||= Date.now();
    return quietSince > 0 && Date.now() - quietSince > 1000;
  }, 120_000);
}

async function openSection() {
  await openPage(browser, 'nav-settings', 'cluster-section');
  await (await byTestId(browser, 'setting-cluster-split')).waitForExist({ timeout: 10_000 });
  await browser.execute(() => document.querySelector('[data-testid="cluster-section"]').scrollIntoView({ block: 'start' }));
}

/** The section shows the saved ring: both hosts, Pipeline, a line per rank. */
async function expectSaved(when) {
  // After a restart the app loads its default model split (a .gguf splits
  // as a pipeline), and the other address is not there: the join fails.
  const rank0 = when === 'after a restart' ? /^Rank 0 · this computer — did not join/ : /^Rank 0 · this computer — not joined yet/;
  // the page redraws as the ring's state comes in: check the reading that
  // showed both ranks in that state (a second reading may catch a redraw)
  // The hosts read as typed until the page is drawn again, then as stored,
  // one a line; reopened, the page is drawn again once the settings it asks
  // for arrive, which may come after the old section answered the wait.
  const redrawn = (s) => when === 'after saving' || s.hosts === HOSTS.join('\n');
  let s;
  await waitFor(browser, `the saved ring (${when})`, async () => {
    s = await shown();
    return s.ranks.length === 2 && rank0.test(s.ranks[0].text) && redrawn(s);
  }, 10_000).catch(() => {});
  assert.ok(s.ranks.length === 2 && rank0.test(s.ranks[0]?.text), `${when}: ${JSON.stringify(s.ranks)}`);
  assert.equal(s.enabled, true, when);
  if (when !== 'after saving') assert.equal(s.hosts, HOSTS.join('\n'), when);
  assert.equal(s.split, 'pipeline', when);
  assert.equal(s.splitLabel, 'Pipeline', when);
  assert.match(s.enabledHint, /--distributed cluster-hostfile\.json --rank N --split pipeline --ring-secret-file cluster-ring\.secret/, when);
  assert.match(s.ranks[0].text, rank0, when);
  assert.equal(s.ranks[0].command, null, `${when}: rank 0 is this Mac`);
  assert.equal(s.ranks[0].copy, null, when);
  assert.match(s.ranks[1].text, /^Rank 1 · 192\.168\.1\.11:5000 — /, when);
  // pasted on the other machine, where the two files were copied, it joins
  assert.equal(s.ranks[1].command, 'vlm serve --model <the same model folder> --distributed cluster-hostfile.json --rank 1 --split pipeline --ring-secret-file cluster-ring.secret', when);
  assert.equal(s.ranks[1].copy, `scp ${join(dataDir, 'cluster-hostfile.json')} ${SECRET_FILE} 192.168.1.11:`, when);
  // the secret itself shows nowhere in the window
  const page = await browser.execute(() => document.body.innerText);
  assert.ok(!page.includes(secretText()), `${when}: the secret is on the page`);
}

/** The ring secret the app made, readable by this user only. */
function secretText() {
  assert.equal(statSync(SECRET_FILE).mode & 0o777, 0o600);
  const text = readFileSync(SECRET_FILE, 'utf8').trim();
  assert.match(text, /^[0-9a-f]{64}$/);
  return text;
}

describe('split models across machines', () => {
  before(async () => {
    // nothing to load: an empty Hugging Face cache, no Hub to reach
    await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: hfHome, HF_ENDPOINT: 'http://127.0.0.1:9' });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('saves two hosts split as a pipeline, and shows them again after reopening and after a restart', async () => {
    await engineSettled();
    await openSection();
    const fresh = await shown();
    assert.deepEqual([fresh.enabled, fresh.hosts, fresh.split], [false, '', 'auto']);
    // on Linux the section speaks of machines, not Macs
    assert.match(fresh.splitHint, /Pipeline: each machine runs a range of the model’s layers/);
    assert.match(fresh.splitHint, /Thunderbolt/);
    assert.match(fresh.splitHint, /Auto picks tensor parallel when the model allows it/);
    assert.deepEqual(fresh.ranks, [], 'off: no rank lines');

    // on, with one host: refused with the reason, nothing stored
    await (await byTestId(browser, 'setting-cluster-enabled')).click();
    await waitFor(browser, 'the refusal', async () => /^Not saved: .*at least 2 ranks/.test((await shown()).saved), 10_000);
    assert.equal((await stored()).enabled, false);

    // two hosts, this Mac first
    await browser.execute((text) => {
      const area = document.querySelector('[data-testid="setting-cluster-hosts"]');
      area.value = text;
      area.dispatchEvent(new Event('input', { bubbles: true }));
    }, `${HOSTS[0]}\n\n ${HOSTS[1]} \n`);
    await waitFor(browser, 'the hosts saved', async () => (await shown()).saved === 'Saved.', 10_000);

    // how to split: Pipeline, from the list
    await (await byTestId(browser, 'setting-cluster-split')).selectByAttribute('value', 'pipeline');
    await waitFor(browser, 'the split saved', async () => (await stored()).split === 'pipeline', 10_000);
    await waitFor(browser, 'Saved.', async () => (await shown()).saved === 'Saved.', 10_000);
    assert.deepEqual(await stored(), { enabled: true, hostfile: '', hosts: HOSTS, join_timeout_secs: 120, split: 'pipeline' });
    await expectSaved('after saving');
    const secret = secretText();

    // Settings reopened
    await openPage(browser, 'nav-models', 'local-models');
    await openSection();
    await expectSaved('reopened');
    // the choice and the rank lines in view
    await waitFor(browser, 'the rank lines', async () => (await shown()).ranks.length === 2, 10_000);
    await browser.execute(() => document.querySelector('[data-testid="setting-cluster-hosts"]').scrollIntoView({ block: 'start' }));
    await shot(browser, 'cluster-01-settings-pipeline');

    // the app restarted: read back from its data folder
    await browser.deleteSession().catch(() => {});
    // the old window gone first: a second instance would hand over to it
    await new Promise((resolve, reject) => {
      const started = Date.now();
      const t = setInterval(() => {
        if (appPids().length === 0) { clearInterval(t); resolve(); } else if (Date.now() - started > 30_000) { clearInterval(t); reject(new Error(`the app did not quit: ${appPids()}`)); }
      }, 200);
    });
    browser = await openApp();
    // (the default model, a .gguf file, loads split as a pipeline: its ring cannot join)
    await engineSettled();
    await openSection();
    await expectSaved('after a restart');
    assert.equal((await stored()).split, 'pipeline');
    // the other machines hold copies: the secret is kept
    assert.equal(secretText(), secret);
    await waitFor(browser, 'the rank lines', async () => (await shown()).ranks.length === 2, 10_000);
    await browser.execute(() => document.querySelector('[data-testid="cluster-ranks"]').scrollIntoView({ block: 'end' }));
    await shot(browser, 'cluster-02-after-restart');
  });
});
