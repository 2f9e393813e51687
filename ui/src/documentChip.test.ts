// A PDF in the composer (issue 34): the chip says what is sent, a model that
// sees also gets the first pages as pictures (removable thumbnails, going
// with the chip when it is removed), and a model that reads text only takes
// the PDF without the "cannot see images" offer.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { Composer } from './composer';
import { describeDocument } from './documentChip';
import type { Outgoing } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const sha = (c: string) => c.repeat(64);
const settle = () => new Promise((r) => setTimeout(r, 0));

function composer(vision: boolean) {
  const sent: Outgoing[] = [];
  const c = new Composer({
    send: async (m) => { sent.push(m); return true; }, stop: () => {}, pickFiles: async () => [], toast: () => {},
    visionModels: async () => [], switchModel: async () => {}, openModels: () => {}, setAnswerFormat: async () => true, setThinking: async () => {},
  });
  document.body.append(c.el);
  c.setModel({ name: vision ? 'Tiny VL' : 'Tiny LM', vision });
  const asked: string[] = [];
  mockIPC((cmd, args) => {
    asked.push(cmd);
    const a = args as Record<string, unknown>;
    if (cmd === 'add_attachment_path') return { sha256: sha('d'), mime: 'application/pdf', size: 900, path: `/att/${sha('d')}.pdf` };
    if (cmd === 'document_info') return { sha256: a.sha256, name: 'report.pdf', pages: 12, pagesWithText: 11, chars: 20000 };
    if (cmd === 'document_page_images') {
      // pages `first`… of 12, four at a time, each page its own picture
      const first = a.first as number;
      return [0, 1, 2, 3].map((k) => first + k).filter((p) => p <= 12)
        .map((p) => ({ sha256: sha(p.toString(16)), mime: 'image/png', size: 10, path: `/att/${sha(p.toString(16))}.png` }));
    }
    return undefined;
  });
  return { c, sent, asked };
}

describe('a PDF in the composer', () => {
  it('says what is sent, in words', () => {
    const info = { sha256: sha('d'), name: 'a.pdf', pages: 12, pagesWithText: 11, chars: 1 };
    expect(describeDocument(info, 4)).toBe('12 pages · text (1 scanned page without), pages 1–4 as images');
    expect(describeDocument({ ...info, pages: 1, pagesWithText: 0 }, 0)).toBe('1 page · no text layer (scanned)');
  });

  it('for a model that sees: the chip and its first pages as pictures, removed together', async () => {
    const { c, sent } = composer(true);
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    const chip = document.querySelector('[data-testid="doc-chip"]')!;
    expect(chip.textContent).toContain('report.pdf');
    expect(chip.textContent).toContain('12 pages · text (1 scanned page without), pages 1–4 as images');
    expect(document.querySelectorAll('[data-testid="composer-thumb"]').length).toBe(4);
    c.input.value = 'Summarize';
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    await settle();
    expect(sent[0].attachments).toEqual([sha('d'), sha('1'), sha('2'), sha('3'), sha('4')]);
  });

  it('shows later pages as the pictures instead, with ‹ and ›', async () => {
    const { c, sent } = composer(true);
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    expect((document.querySelector('[data-testid="doc-pages-before"]') as HTMLButtonElement).disabled).toBe(true);
    (document.querySelector('[data-testid="doc-pages-after"]') as HTMLButtonElement).click();
    await settle();
    await settle();
    expect(document.querySelector('[data-testid="doc-chip"]')!.textContent).toContain('pages 5–8 as images');
    expect(document.querySelectorAll('[data-testid="composer-thumb"]').length).toBe(4);
    c.input.value = 'Summarize';
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    await settle();
    expect(sent[0].attachments).toEqual([sha('d'), sha('5'), sha('6'), sha('7'), sha('8')]);
  });

  it('removing the chip takes its pages along', async () => {
    const { c } = composer(true);
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    (document.querySelector('[data-testid="remove-doc"]') as HTMLButtonElement).click();
    expect(document.querySelectorAll('[data-testid="doc-chip"], [data-testid="composer-thumb"]').length).toBe(0);
  });

  it('for a model that reads text only: the PDF alone, sent without the offer of another model', async () => {
    const { c, sent, asked } = composer(false);
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    expect(asked).not.toContain('document_page_images');
    expect(document.querySelector('[data-testid="doc-chip"]')!.textContent).toContain('12 pages · text (1 scanned page without)');
    c.input.value = 'Summarize';
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    await settle();
    expect(sent).toEqual([{ text: 'Summarize', attachments: [sha('d')] }]);
    expect((document.querySelector('[data-testid="vision-offer"]') as HTMLElement).hidden).toBe(true);
  });
});
