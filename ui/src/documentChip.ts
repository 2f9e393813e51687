// A PDF in the composer or in a sent message: a chip with its name, its pages
// and what the model gets from it (its text, and for a model that sees, as
// many of its first pages as pictures as fit the context beside the text,
// which sit beside the chip as thumbnails the person may remove; a document
// too long for the context sends the passages that match each question). In
// a sent message the chip lists the pages the latest answer was given. The
// app reads the PDF as it is attached (src-tauri/src/documents.rs).
import { invoke } from '@tauri-apps/api/core';
import type { Attachment } from './api';
import type { DocumentPages } from './bindings/DocumentPages';
import { h } from './dom';

export const PDF_MIME = 'application/pdf';

/** How many pages a model that sees gets as pictures when the app cannot plan them. */
export const PAGES_AS_IMAGES = 4;

/** What the loaded model gets of a document (the app plans it for the model's context). */
export interface PagePlan { whole: boolean; pictures: number; pageTokens: number }

/** Plans a stored document for the loaded model. */
export function documentPagePlan(sha256: string): Promise<PagePlan> {
  return invoke<PagePlan>('document_page_plan', { sha256 });
}

/** What the app read from a stored document. */
export interface DocumentInfo { sha256: string; name: string; pages: number; pagesWithText: number; chars: number }

export function isDocument(a: Attachment): boolean {
  return a.mime === PDF_MIME;
}

/** Pages of a stored PDF rendered as image attachments, from `first` (counted from 1). */
export function documentPageImages(sha256: string, first: number, count: number): Promise<Attachment[]> {
  return invoke<Attachment[]>('document_page_images', { sha256, first, count });
}

const infos = new Map<string, Promise<DocumentInfo>>();

/** The document's info, asked of the app once per document. */
export function documentInfo(sha256: string): Promise<DocumentInfo> {
  let info = infos.get(sha256);
  if (!info) {
    info = invoke<DocumentInfo>('document_info', { sha256 });
    infos.set(sha256, info);
    info.catch(() => infos.delete(sha256));
  }
  return info;
}

/** Pages as a short list: "1–3, 7, 12". */
export function pageList(pages: number[]): string {
  const out: string[] = [];
  for (let i = 0; i < pages.length;) {
    let j = i;
    while (j + 1 < pages.length && pages[j + 1] === pages[j] + 1) j++;
    out.push(j > i ? `${pages[i]}–${pages[j]}` : `${pages[i]}`);
    i = j + 1;
  }
  return out.join(', ');
}

/** What is sent, in words: "12 pages · text, pages 1–4 as images" (`first`: the first page
 * shown as a picture); a document too long to send whole says what goes instead. */
export function describeDocument(info: DocumentInfo, pagesAsImages: number, first = 1, whole = true): string {
  const pages = `${info.pages} page${info.pages === 1 ? '' : 's'}`;
  const scanned = info.pages - info.pagesWithText;
  if (!whole) return `${pages} · too long for the context: the passages that match each question go, with their pages`;
  let sent = info.pagesWithText === 0 ? 'no text layer (scanned)' : 'text';
  if (scanned > 0 && info.pagesWithText > 0) sent += ` (${scanned} scanned page${scanned === 1 ? '' : 's'} without)`;
  const last = first + pagesAsImages - 1;
  if (pagesAsImages > 0) sent += `, page${pagesAsImages === 1 ? '' : 's'} ${first}${pagesAsImages > 1 ? `–${last}` : ''} as images`;
  return `${pages} · ${sent}`;
}

/** The pages an answer was given, in words: "used p. 2, 7 (p. 7 also as a picture)". */
export function describeUsed(used: DocumentPages, pages: number): string {
  if (used.whole) return `used: all ${pages} page${pages === 1 ? '' : 's'}`;
  if (used.pages.length === 0) return 'used: no page matched the question';
  const pictures = used.pictures.length ? ` (p. ${pageList(used.pictures)} also as ${used.pictures.length === 1 ? 'a picture' : 'pictures'})` : '';
  return `used: p. ${pageList(used.pages)}${pictures}`;
}

/** Which pages go as pictures, and how to show others (the composer's chip, for a model that sees). */
export interface PageRange { first: number; count: number; show(first: number): void }

export interface ChipOptions {
  /** How many pages go as pictures (the thumbnails beside the chip). */
  pagesAsImages?: number;
  remove?: () => void;
  /** ‹ and › show the pages before or after as the pictures instead. */
  range?: PageRange;
  /** What the loaded model gets of it (the composer). */
  plan?: PagePlan;
  /** The pages the latest answer was given (a sent message). */
  used?: DocumentPages;
}

/** The chip; its text fills in when the app has said what the document is. */
export function documentChip(a: Attachment, options: ChipOptions = {}): HTMLElement {
  const { pagesAsImages = 0, remove, range, plan, used } = options;
  const name = h('span', { class: 'doc-name', 'data-testid': 'doc-name' }, 'PDF');
  const what = h('span', { class: 'doc-what', 'data-testid': 'doc-what' }, 'reading…');
  const usedLine = used ? h('span', { class: 'doc-used', 'data-testid': 'doc-used', title: 'The pages the latest answer was given' }) : null;
  const chip = h('div', { class: 'doc-chip', 'data-testid': 'doc-chip', 'data-sha': a.sha256, title: 'PDF document' },
    h('span', { class: 'doc-icon', 'aria-hidden': 'true' }, 'PDF'),
    h('span', { class: 'doc-text' }, name, what, usedLine),
    remove ? h('button', { class: 'remove', title: 'Remove', 'aria-label': 'Remove document', 'data-testid': 'remove-doc', onclick: remove }, '×') : null);
  void documentInfo(a.sha256).then((info) => {
    name.textContent = info.name;
    what.textContent = describeDocument(info, pagesAsImages, range?.first ?? 1, plan?.whole ?? true);
    if (usedLine && used) usedLine.textContent = describeUsed(used, info.pages);
    chip.title = `${info.name}: ${what.textContent}${used ? `; ${describeUsed(used, info.pages)}` : ''}`;
    if (range && range.count > 0 && info.pages > range.count) {
      const step = (first: number, off: boolean, label: string, text: string) => h('button', {
        class: 'link doc-pages', 'aria-label': label, 'data-testid': `doc-pages-${text === '‹' ? 'before' : 'after'}`,
        disabled: off, onclick: () => range.show(first),
      }, text);
      const after = range.first + range.count;
      what.append(' ', step(Math.max(1, range.first - range.count), range.first <= 1, 'Earlier pages as images', '‹'),
        step(after, after > info.pages, 'Later pages as images', '›'));
    }
  }, () => { what.textContent = 'no longer stored'; });
  return chip;
}
