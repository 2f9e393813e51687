// A PDF in the composer or in a sent message: a chip with its name, its pages
// and what the model gets from it (its text, and for a model that sees, the
// first pages as pictures, which sit beside the chip as thumbnails the person
// may remove). The app reads the PDF as it is attached (src-tauri/src/documents.rs).
import { invoke } from '@tauri-apps/api/core';
import type { Attachment } from './api';
import { h } from './dom';

export const PDF_MIME = 'application/pdf';

/** How many pages a model that sees gets as pictures when a PDF is attached. */
export const PAGES_AS_IMAGES = 4;

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

/** What is sent, in words: "12 pages · text, pages 1–4 as images" (`first`: the first page shown as a picture). */
export function describeDocument(info: DocumentInfo, pagesAsImages: number, first = 1): string {
  const pages = `${info.pages} page${info.pages === 1 ? '' : 's'}`;
  const scanned = info.pages - info.pagesWithText;
  let sent = info.pagesWithText === 0 ? 'no text layer (scanned)' : 'text';
  if (scanned > 0 && info.pagesWithText > 0) sent += ` (${scanned} scanned page${scanned === 1 ? '' : 's'} without)`;
  const last = first + pagesAsImages - 1;
  if (pagesAsImages > 0) sent += `, page${pagesAsImages === 1 ? '' : 's'} ${first}${pagesAsImages > 1 ? `–${last}` : ''} as images`;
  return `${pages} · ${sent}`;
}

/** Which pages go as pictures, and how to show others (the composer's chip, for a model that sees). */
export interface PageRange { first: number; count: number; show(first: number): void }

/** The chip; its text fills in when the app has said what the document is. With `range`,
 * ‹ and › show the pages before or after as the pictures instead. */
export function documentChip(a: Attachment, pagesAsImages: number, remove?: () => void, range?: PageRange): HTMLElement {
  const name = h('span', { class: 'doc-name', 'data-testid': 'doc-name' }, 'PDF');
  const what = h('span', { class: 'doc-what', 'data-testid': 'doc-what' }, 'reading…');
  const chip = h('div', { class: 'doc-chip', 'data-testid': 'doc-chip', 'data-sha': a.sha256, title: 'PDF document' },
    h('span', { class: 'doc-icon', 'aria-hidden': 'true' }, 'PDF'),
    h('span', { class: 'doc-text' }, name, what),
    remove ? h('button', { class: 'remove', title: 'Remove', 'aria-label': 'Remove document', 'data-testid': 'remove-doc', onclick: remove }, '×') : null);
  void documentInfo(a.sha256).then((info) => {
    name.textContent = info.name;
    what.textContent = describeDocument(info, pagesAsImages, range?.first ?? 1);
    chip.title = `${info.name}: ${what.textContent}`;
    if (range && info.pages > range.count) {
      const step = (first: number, label: string, text: string) => h('button', {
        class: 'link doc-pages', 'aria-label': label, 'data-testid': `doc-pages-${text === '‹' ? 'before' : 'after'}`,
        disabled: first < 1 || first > info.pages, onclick: () => range.show(first),
      }, text);
      what.append(' ', step(range.first - range.count, 'Earlier pages as images', '‹'), step(range.first + range.count, 'Later pages as images', '›'));
    }
  }, () => { what.textContent = 'no longer stored'; });
  return chip;
}
