// A picture from the chat, shown larger over the window: a click on a sent
// image opens it, Escape (or a click anywhere, or Close) closes it and puts
// the focus back where it was.
import { h } from './dom';

/** Opens the viewer on `src`; returns a function that closes it. */
export function openImageViewer(src: string, alt: string): () => void {
  const before = document.activeElement as HTMLElement | null;
  const close = () => {
    overlay.remove();
    document.removeEventListener('keydown', onKey, true);
    before?.focus?.();
  };
  // before the page's own keys: Esc here closes the picture, never stops a reply
  const onKey = (e: KeyboardEvent) => {
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); close(); }
  };
  const closeButton = h('button', { class: 'image-viewer-close', 'aria-label': 'Close the picture', 'data-testid': 'image-viewer-close', onclick: () => close() }, '×');
  const overlay = h('div', { class: 'modal-overlay image-viewer', role: 'dialog', 'aria-modal': 'true', 'aria-label': alt, 'data-testid': 'image-viewer', onclick: () => close() },
    h('img', { src, alt }),
    closeButton);
  document.body.append(overlay);
  document.addEventListener('keydown', onKey, true);
  closeButton.focus();
  return close;
}
