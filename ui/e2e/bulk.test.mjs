// Bulk mode in the real app (Xvfb, tauri-driver): a tiny random Qwen2-VL is
// loaded, a folder of images (one of them a text file named like a picture)
// is dropped from another window onto the Bulk page, one prompt runs over
// them all, the table fills (answers, tokens, time; the bad file failed with
// its reason), and the table exports to CSV and JSON Lines files whose rows
// are the table's. Then a folder of three PDFs: a row each, asked with its
// text (page markers) and its first page as a picture; and one of them in a
// chat: its pages as pictures (all fit) and the pages the answer was given.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  allByTestId, byTestId, dropFile, loadModelFromDisk, modelReady, openApp, openPage, send, shot, startDriver, stopDriver,
  tempFolder, textOf, textPdf, waitFor, writeTinyVisionModel,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-bulk-');
const hfHome = join(dataDir, 'hf');
const visionRepo = 'e2e/Tiny-Qwen2-VL';
const colours = ['#d33', '#3a3', '#33d', '#dd3', '#3dd'];
let browser;

/** Five small pictures of different colours and sizes, and a text file named like one. */
function imageFolder() {
  const folder = join(dataDir, 'photos');
  mkdirSync(folder);
  colours.forEach((c, i) => execFileSync('convert', ['-size', `${56 + i * 8}x${48 + i * 4}`, `xc:${c}`, join(folder, `photo_${i}.png`)]));
  writeFileSync(join(folder, 'z_notes.png'), 'these are notes, not a picture');
  return folder;
}

describe('bulk mode', () => {
  before(async () => {
    writeTinyVisionModel(hfHome, visionRepo);
    await startDriver({ VLM_DATA_DIR: dataDir, HF_HOME: hfHome });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('asks one prompt about a dropped folder, fills the table and exports it', async () => {
    await modelReady(browser);
    await loadModelFromDisk(browser, `hf:${visionRepo}`, visionRepo);
    await openPage(browser, 'nav-bulk', 'bulk-page');
    await dropFile(imageFolder());
    await waitFor(browser, 'the dropped folder', async () => (await textOf(browser, await byTestId(browser, 'bulk-drop'))).includes('1 dropped: photos'), 20_000);
    await (await byTestId(browser, 'bulk-prompt')).setValue('What colour is this picture?');
    await (await byTestId(browser, 'bulk-max-tokens')).setValue('8');
    await (await byTestId(browser, 'bulk-run')).click();

    // the table: one row per image, filled as answers arrive, until none is pending
    await waitFor(browser, 'six rows', async () => (await allByTestId(browser, 'bulk-row')).length === 6, 30_000);
    const statuses = () => browser.execute(() => [...document.querySelectorAll('[data-testid="bulk-row"]')].map((r) => r.getAttribute('data-status')));
    await waitFor(browser, 'every row answered', async () => !(await statuses()).includes('pending'), 60_000);
    assert.deepEqual(await statuses(), ['done', 'done', 'done', 'done', 'done', 'failed']);
    await waitFor(browser, 'the job to finish', async () => (await textOf(browser, await byTestId(browser, 'bulk-status'))).startsWith('finished'), 20_000);
    assert.equal(await textOf(browser, await byTestId(browser, 'bulk-progress-text')), '5 of 6 done · 1 failed');
    const rows = await allByTestId(browser, 'bulk-row');
    assert.match(await textOf(browser, rows[5]), /z_notes\.png[\s\S]*not a supported image/, 'the text file fails with its reason');
    assert.match(await textOf(browser, rows[0]), /photo_0\.png[\s\S]*\d+ → 8[\d.]+ s$/, 'a done row shows its tokens and time');
    // thumbnails come from the stored images
    const thumb = await rows[0].$('img.bulk-thumb');
    await waitFor(browser, 'a thumbnail', async () => browser.execute((e) => e.complete && e.naturalWidth === 56, thumb), 10_000);
    await shot(browser, 'bulk-01-table');

    // export: both files hold the table's rows
    await (await byTestId(browser, 'bulk-export-jsonl')).click();
    const savedPath = async () => (await textOf(browser, await byTestId(browser, 'bulk-exported'))).replace(/^Saved to /, '');
    await waitFor(browser, 'the JSON Lines export', async () => (await savedPath()).endsWith('.jsonl'), 10_000);
    const jsonl = readFileSync(await savedPath(), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(jsonl.map((r) => [r.name, r.status]), [...colours.map((_, i) => [`photo_${i}.png`, 'done']), ['z_notes.png', 'failed']]);
    assert.ok(jsonl.slice(0, 5).every((r) => r.generated_tokens === 8 && r.prompt_tokens > 0 && r.seconds > 0));
    assert.equal(jsonl[5].error_code, 'NOT_AN_IMAGE');
    await (await byTestId(browser, 'bulk-export-csv')).click();
    await waitFor(browser, 'the CSV export', async () => (await savedPath()).endsWith('.csv'), 10_000);
    const csv = readFileSync(await savedPath(), 'utf8');
    assert.ok(csv.startsWith('name,status,answer,error_code,error,prompt_tokens,generated_tokens,seconds\n'), csv.slice(0, 200));
    for (const r of jsonl) assert.ok(csv.includes(`${r.name},${r.status},`), `${r.name} in the CSV`);
    assert.ok(csv.includes('z_notes.png,failed,,NOT_AN_IMAGE,'));
    await browser.execute(() => [...document.querySelectorAll('[data-testid="bulk-row"]')].pop().scrollIntoView());
    await shot(browser, 'bulk-02-exported');
  });

  it('takes a folder of PDFs, a row each with its text', async () => {
    const folder = join(dataDir, 'invoices');
    mkdirSync(folder);
    const pages = (k) => [
      [`Invoice INV-00${k}`, `Date: 2026-0${k}-15`, 'Bill to: The Bird Survey Society, 12 River Lane'],
      [`Total due: ${k}40.00 EUR`, 'Payment within thirty days of the date above.'],
    ];
    const textBytes = (k) => pages(k).flat().join('\n').length;
    for (const k of [1, 2, 3]) writeFileSync(join(folder, `invoice_${k}.pdf`), textPdf(pages(k)), 'latin1');
    await dropFile(folder);
    await waitFor(browser, 'the dropped PDFs', async () => (await textOf(browser, await byTestId(browser, 'bulk-drop'))).includes('1 dropped: invoices'), 20_000);
    await (await byTestId(browser, 'bulk-prompt')).setValue('What is the invoice number?');
    await (await byTestId(browser, 'bulk-run')).click();
    const statuses = () => browser.execute(() => [...document.querySelectorAll('[data-testid="bulk-row"]')].map((r) => r.getAttribute('data-status')));
    await waitFor(browser, 'three rows answered', async () => {
      const s = await statuses();
      return s.length === 3 && !s.includes('pending');
    }, 60_000);
    assert.deepEqual(await statuses(), ['done', 'done', 'done']);
    const rows = await allByTestId(browser, 'bulk-row');
    assert.match(await textOf(browser, rows[0]), /invoice_1\.pdf/);
    assert.equal((await allByTestId(browser, 'bulk-doc')).length, 3, 'each PDF row shows a PDF badge, not a broken picture');
    await shot(browser, 'bulk-03-pdfs');
    await (await byTestId(browser, 'bulk-export-jsonl')).click();
    const savedPath = async () => (await textOf(browser, await byTestId(browser, 'bulk-exported'))).replace(/^Saved to /, '');
    await waitFor(browser, 'the JSON Lines export', async () => (await savedPath()).endsWith('.jsonl'), 10_000);
    const jsonl = readFileSync(await savedPath(), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(jsonl.map((r) => [r.name, r.status]), [1, 2, 3].map((k) => [`invoice_${k}.pdf`, 'done']));
    // each prompt carries its document's text (the tiny model's tokenizer: about a token a byte)
    for (const [i, r] of jsonl.entries()) assert.ok(r.prompt_tokens > textBytes(i + 1) / 2, `${r.name}: ${r.prompt_tokens} prompt tokens`);
  });

  it('a PDF in a chat with the model that sees: every page that fits as a picture, and the pages the answer was given', async () => {
    await openPage(browser, 'nav-chat', 'composer-input');
    await dropFile(join(dataDir, 'invoices', 'invoice_2.pdf'));
    // two short pages fit this context whole, with room for the answer: both go as pictures
    await waitFor(browser, 'the chip and its pictures', async () => (await allByTestId(browser, 'composer-thumb')).length === 2
      && /2 pages · text, pages 1–2 as images/.test(await textOf(browser, await byTestId(browser, 'doc-chip'))), 30_000);
    await shot(browser, 'bulk-04-pdf-chip-vision');
    await send(browser, 'What is the total due?');
    await waitFor(browser, 'the pages used', async () => (await allByTestId(browser, 'doc-used')).length === 1, 60_000);
    assert.equal(await textOf(browser, await byTestId(browser, 'doc-used')), 'used: all 2 pages');
    assert.equal((await allByTestId(browser, 'msg-image')).length, 2, 'the message keeps its two page pictures');
  });
});
