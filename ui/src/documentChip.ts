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

/** What is sent, in words: "12 pages · text, pages 1–4 as images". */
export function describeDocument(info: DocumentInfo, pagesAsImages: number): string {
  const pages = `${info.pages} page${info.pages === 1 ? '' : 's'}`;
  const scanned = info.pages - info.pagesWithText;
  let sent = info.pagesWithText === 0 ? 'no text layer (scanned)' : 'text';
  if (scanned > 0 && info.pagesWithText > 0) sent += ` (${scanned} scanned page${scanned === 1 ? '' : 's'} without)`;
  if (pagesAsImages > 0) sent += `, page${pagesAsImages === 1 ? '' : 's'} 1${pagesAsImages > 1 ? `–${pagesAsImages}` : ''} as images`;
  return `${pages} · ${sent}`;
}

/** The chip; its text fills in when the app has said what the document is. */
export function documentChip(a: Attachment, pagesAsImages: number, remove?: () => void): HTMLElement {
  const name = h('span', { class: 'doc-name', 'data-testid': 'doc-name' }, 'PDF');
  const what = h('span', { class: 'doc-what', 'data-testid': 'doc-what' }, 'reading…');
  const chip = h('div', { class: 'doc-chip', 'data-testid': 'doc-chip', 'data-sha': a.sha256, title: 'PDF document' },
    h('span', { class: 'doc-icon', 'aria-hidden': 'true' }, 'PDF'),
    h('span', { class: 'doc-text' }, name, what),
    remove ? h('button', { class: 'remove', title: 'Remove', 'aria-label': 'Remove document', 'data-testid': 'remove-doc', onclick: remove }, '×') : null);
  void documentInfo(a.sha256).then((info) => {
    name.textContent = info.name;
    what.textContent = describeDocument(info, pagesAsImages);
    chip.title = `${info.name}: ${what.textContent}`;
  }, () => { what.textContent = 'no longer stored'; });
  return chip;
}
