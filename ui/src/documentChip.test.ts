// A PDF in the composer (issue 34): the chip says what is sent, a model that
// sees also gets as many first pages as pictures as the app says fit the
// context (removable thumbnails, going with the chip when it is removed), a
// document too long for the context none (its passages' pages go per
// question), a model that reads text only takes the PDF without the "cannot
// see images" offer; a sent message's chip lists the pages the latest answer
// was given.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { Composer } from './composer';
import { describeDocument, describeUsed, pageList, type PagePlan } from './documentChip';
import { ChatView } from './chatView';
import type { Message, Outgoing } from './api';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const sha = (c: string) => c.repeat(64);
const settle = () => new Promise((r) => setTimeout(r, 0));

function composer(vision: boolean, plan: PagePlan | 'fails' = { whole: true, pictures: 4, pageTokens: 300 }) {
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
    if (cmd === 'document_page_plan') {
      if (plan === 'fails') throw { code: 'NO_MODEL', message: 'no model is loaded' };
      return plan;
    }
    if (cmd === 'document_page_images') {
      // pages `first`… of 12, `count` at a time, each page its own picture
      const first = a.first as number;
      return Array.from({ length: a.count as number }, (_, k) => first + k).filter((p) => p <= 12)
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
    expect(describeDocument(info, 0, 1, false)).toBe('12 pages · too long for the context: the passages that match each question go, with their pages');
    expect(pageList([1, 2, 3, 7, 9, 10])).toBe('1–3, 7, 9–10');
    const used = { sha256: sha('d'), name: 'a.pdf', whole: false, pages: [2, 7, 8], pictures: [7] };
    expect(describeUsed(used, 12)).toBe('used: p. 2, 7–8 (p. 7 also as a picture)');
    expect(describeUsed({ ...used, pictures: [] }, 12)).toBe('used: p. 2, 7–8');
    expect(describeUsed({ ...used, whole: true, pages: [1, 2] }, 2)).toBe('used: all 2 pages');
    expect(describeUsed({ ...used, pages: [], pictures: [] }, 12)).toBe('used: no page matched the question');
  });

  it('every page as a picture when all fit the context, and no ‹ › then', async () => {
    const { c, sent } = composer(true, { whole: true, pictures: 12, pageTokens: 200 });
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    expect(document.querySelector('[data-testid="doc-chip"]')!.textContent).toContain('pages 1–12 as images');
    expect(document.querySelectorAll('[data-testid="composer-thumb"]').length).toBe(12);
    expect(document.querySelector('[data-testid="doc-pages-after"]')).toBeNull();
    c.input.value = 'Summarize';
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    await settle();
    expect(sent[0].attachments).toEqual([sha('d'), ...Array.from({ length: 12 }, (_, k) => sha((k + 1).toString(16)))]);
  });

  it('the first pages that fit, three at a time with ‹ ›', async () => {
    const { c } = composer(true, { whole: true, pictures: 3, pageTokens: 900 });
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    expect(document.querySelectorAll('[data-testid="composer-thumb"]').length).toBe(3);
    (document.querySelector('[data-testid="doc-pages-after"]') as HTMLButtonElement).click();
    await settle();
    await settle();
    expect(document.querySelector('[data-testid="doc-chip"]')!.textContent).toContain('pages 4–6 as images');
    (document.querySelector('[data-testid="doc-pages-before"]') as HTMLButtonElement).click();
    await settle();
    await settle();
    expect(document.querySelector('[data-testid="doc-chip"]')!.textContent).toContain('pages 1–3 as images');
  });

  it('a document too long for the context: no pictures now, the chip says the passages go', async () => {
    const { c, sent, asked } = composer(true, { whole: false, pictures: 0, pageTokens: 0 });
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    expect(asked).not.toContain('document_page_images');
    expect(document.querySelector('[data-testid="doc-chip"]')!.textContent).toContain('too long for the context');
    expect(document.querySelectorAll('[data-testid="composer-thumb"]').length).toBe(0);
    c.input.value = 'What is the total?';
    c.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    await settle();
    expect(sent[0].attachments).toEqual([sha('d')]);
  });

  it('without a plan (the model is loading) the first four pages', async () => {
    const { c } = composer(true, 'fails');
    await c.addPaths(['/docs/report.pdf']);
    await settle();
    expect(document.querySelectorAll('[data-testid="composer-thumb"]').length).toBe(4);
  });

  it('a sent message\'s chip lists the pages the latest answer was given', async () => {
    composer(false);
    const view = new ChatView({ regenerate: () => {}, edit: () => {}, continueReply: () => {}, sendStarter: () => {}, openModels: () => {}, switchBranch: () => {}, deleteBranch: () => {} });
    document.body.append(view.el);
    const pdf = { sha256: sha('d'), mime: 'application/pdf', size: 900, path: '/att/d.pdf' };
    const msg = (over: Partial<Message>): Message => ({
      id: 1, chat_id: 1, parent_id: null, siblings: [], role: 'user', content: '', reasoning: null, attachments: [], stats: null, model: null,
      status: 'complete', error: null, error_code: null, created_at: 0, updated_at: 0, tool_calls: [], tool_result: null, ...over,
    });
    const used = (pages: number[]) => ({ documents: [{ sha256: sha('d'), name: 'report.pdf', whole: false, pages, pictures: [] }] });
    view.show([
      msg({ id: 1, content: 'What is the total?', attachments: [pdf] }),
      msg({ id: 2, role: 'assistant', content: 'See p. 7.', stats: used([7, 8]) }),
      msg({ id: 3, content: 'And the date?' }),
      msg({ id: 4, role: 'assistant', content: 'p. 2', stats: used([2]) }),
    ], null);
    await settle();
    await settle();
    const chip = view.el.querySelector('[data-testid="doc-chip"]')!;
    expect(chip.querySelector('[data-testid="doc-used"]')!.textContent).toBe('used: p. 2');
    // only the first answer so far: its pages
    view.show([
      msg({ id: 1, content: 'What is the total?', attachments: [pdf] }),
      msg({ id: 2, role: 'assistant', content: 'See p. 7.', stats: used([7, 8]) }),
    ], null);
    await settle();
    await settle();
    expect(view.el.querySelector('[data-testid="doc-used"]')!.textContent).toBe('used: p. 7–8');
    // before any answer: nothing listed
    view.show([msg({ id: 1, content: 'What is the total?', attachments: [pdf] })], null);
    expect(view.el.querySelector('[data-testid="doc-used"]')).toBeNull();
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
