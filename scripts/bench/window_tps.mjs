// The app's side of scripts/bench-window.sh: starts the real app (window
// open under Xvfb, fresh data folder, default model), asks PROMPT ROUNDS
// times greedily with MAX_TOKENS, and prints the engine's decode tok/s of
// each reply as the app stored it (its stats line), one number a line.
// Usage: node scripts/bench/window_tps.mjs ROUNDS MAX_TOKENS PROMPT   (needs DISPLAY and tauri-driver)
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { allByTestId, byTestId, openApp, send, startDriver, stopDriver, textOf, waitFor } from '../../ui/e2e/harness.mjs';

// Written against what every build of the app shows (this script also
// measures builds from before the status bar's and settings' rework).
const modelReady = (b) => waitFor(b, 'the model', async () => /running|idle|answering/.test(await textOf(b, await byTestId(b, 'status-bar'))));
async function saveSettings(b, values) {
  await (await byTestId(b, 'nav-settings')).click();
  await (await byTestId(b, 'setting-system_prompt')).waitForExist({ timeout: 20_000 });
  for (const [key, value] of Object.entries(values)) await (await byTestId(b, `setting-${key}`)).setValue(value);
  await b.keys(['Tab']);
  const save = await byTestId(b, 'save-settings');
  if (await save.isExisting()) await save.click();
  await waitFor(b, 'saved', async () => (await (await byTestId(b, 'settings-saved')).getText()) === 'Saved.', 10_000);
}

const [rounds, maxTokens, prompt] = [Number(process.argv[2]), process.argv[3], process.argv[4]];
const dataDir = mkdtempSync(join(tmpdir(), 'vlm-bench-window-'));
await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: join(dataDir, 'hf') });
const b = await openApp();
try {
  await modelReady(b);
  await saveSettings(b, { temperature: '0', max_tokens: maxTokens });
  await (await byTestId(b, 'nav-chat')).click();
  for (let i = 0; i < rounds; i++) {
    await (await byTestId(b, 'new-chat')).click();
    await send(b, prompt);
    await waitFor(b, 'the reply', async () => (await allByTestId(b, 'msg-assistant')).length === 1 && (await allByTestId(b, 'msg-live')).length === 0, 600_000);
    const stats = await textOf(b, await byTestId(b, 'stats'));
    const tps = /([\d.]+) tok\/s/.exec(stats)?.[1];
    const tokens = /(\d+) tokens/.exec(stats)?.[1];
    console.log(`window ${tps} ${tokens}`);
  }
} finally {
  await b.deleteSession().catch(() => {});
  stopDriver();
  setTimeout(() => process.exit(0), 2000).unref();
}
