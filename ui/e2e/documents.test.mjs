// A PDF in a chat, in the real window (Xvfb) with the default text-only
// model: dropped from another window with the mouse (XDND), read by the app
// (a chip with its name, pages and what is sent), asked about, and sent as
// its text with page markers: the reply's prompt holds the document's tokens.
// Screenshots go to screenshots/ (ignored by git).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  allByTestId, byTestId, dropFile, modelReady, openApp, saveSettings, send, shot, startDriver, stopDriver,
  tempFolder, textOf, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-documents-');
const pdfPath = join(dataDir, 'field-notes.pdf');
let browser;

/** A PDF of text pages (Helvetica, one line per entry), with a correct cross-reference table. */
function textPdf(pages) {
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    `<< /Type /Pages /Kids [${pages.map((_, k) => `${4 + 2 * k} 0 R`).join(' ')}] /Count ${pages.length} >>`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
  ];
  pages.forEach((lines, k) => {
    objects.push(`<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents ${5 + 2 * k} 0 R /Resources << /Font << /F1 3 0 R >> >> >>`);
    const content = `BT /F1 12 Tf 14 TL 72 720 Td\n${lines.map((l) => `(${l}) Tj T*`).join('\n')}\nET`;
    objects.push(`<< /Length ${content.length} >>\nstream\n${content}\nendstream`);
  });
  let out = '%PDF-1.4\n';
  const offsets = objects.map((o, i) => { const at = out.length; out += `${i + 1} 0 obj\n${o}\nendobj\n`; return at; });
  const xref = out.length;
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n${offsets.map((o) => `${String(o).padStart(10, '0')} 00000 n \n`).join('')}`;
  out += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return out;
}

describe('a PDF in a chat', () => {
  before(async () => {
    const filler = 'The survey team walked along the river and counted the birds they saw near the old bridge.';
    writeFileSync(pdfPath, textPdf([
      ['Field notes, spring survey', filler, filler],
      ['Results', 'The code word for the survey is HERON.', filler],
      ['Appendix', filler, filler, filler],
    ]), 'latin1');
    await startDriver({ VLM_DATA_DIR: dataDir });
    browser = await openApp();
  });

  after(async () => {
    await browser?.deleteSession().catch(() => {});
    stopDriver();
    setTimeout(() => process.exit(process.exitCode ?? 0), 3000).unref();
  });

  it('reads a dropped PDF, shows its chip, and sends its text with the question', async () => {
    await modelReady(browser);
    await saveSettings(browser, { temperature: '0', max_tokens: '24' });
    await (await byTestId(browser, 'nav-chat')).click();
    await dropFile(pdfPath);
    await waitFor(browser, 'the document chip', async () => (await allByTestId(browser, 'doc-chip')).length === 1, 60_000);
    const chip = (await allByTestId(browser, 'doc-chip'))[0];
    await waitFor(browser, 'what the chip says', async () => /3 pages · text/.test(await textOf(browser, chip)), 20_000);
    assert.match(await textOf(browser, chip), /field-notes\.pdf/);
    assert.equal(await (await byTestId(browser, 'vision-offer')).isDisplayed(), false, 'a PDF goes as text to a model that cannot see');
    await shot(browser, '60-document-chip');

    await send(browser, 'What is the code word? Answer with the page.');
    try {
      await waitFor(browser, 'the finished reply', async () => (await allByTestId(browser, 'msg-assistant')).length === 1
        && (await allByTestId(browser, 'msg-live')).length === 0, 120_000);
    } finally {
      await shot(browser, '61-document-answer');
    }
    // greedy, and the answer is on page 2 of what was sent: the built-in SmolLM2 reads it off
    assert.match(await textOf(browser, (await allByTestId(browser, 'msg-assistant'))[0]), /HERON/);
    const user = (await allByTestId(browser, 'msg-user'))[0];
    assert.match(await textOf(browser, user), /field-notes\.pdf/, 'the sent message keeps its document');
    assert.match(await textOf(browser, user), /What is the code word/);
    // the question alone is a few dozen tokens; the three pages' text adds well over a hundred
    const stats = await textOf(browser, (await allByTestId(browser, 'stats'))[0]);
    const prompt = Number(/prompt (\d+) tokens/.exec(stats)?.[1] ?? 0);
    assert.ok(prompt > 150, `the prompt has the document in it: ${stats}`);
  });
});
