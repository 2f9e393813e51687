// A PDF in a chat, in the real window (Xvfb) with the default text-only
// model: dropped from another window with the mouse (XDND), read by the app
// (a chip with its name, pages and what is sent), asked about, and sent as
// its text with page markers: the reply's prompt holds the document's tokens,
// and the sent message's chip lists the pages the answer was given.
// Screenshots go to screenshots/ (ignored by git).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  allByTestId, byTestId, dropFile, modelReady, openApp, saveSettings, send, shot, startDriver, stopDriver,
  tempFolder, textOf, textPdf, waitFor,
} from './harness.mjs';

const dataDir = tempFolder('vlm-e2e-documents-');
const pdfPath = join(dataDir, 'field-notes.pdf');
let browser;

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
    // the whole of it fit: the chip says the answer was given every page
    await waitFor(browser, 'the pages used', async () => (await allByTestId(browser, 'doc-used')).length === 1, 10_000);
    assert.equal(await textOf(browser, (await allByTestId(browser, 'doc-used'))[0]), 'used: all 3 pages');
    assert.match(await textOf(browser, user), /What is the code word/);
    // the question alone is a few dozen tokens; the three pages' text adds well over a hundred
    const stats = await textOf(browser, (await allByTestId(browser, 'stats'))[0]);
    const prompt = Number(/prompt (\d+) tokens/.exec(stats)?.[1] ?? 0);
    assert.ok(prompt > 150, `the prompt has the document in it: ${stats}`);
  });
});
