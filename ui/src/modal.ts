// An in-window confirmation dialog (native confirm() is not dependable in
// every web view, and this one follows the app's theme).
import { h } from './dom';

export function confirmDialog(title: string, body: string, confirmLabel: string): Promise<boolean> {
  return new Promise((resolve) => {
    const close = (answer: boolean) => { overlay.remove(); document.removeEventListener('keydown', onKey); resolve(answer); };
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') close(false);
      if (e.key === 'Enter') close(true);
    };
    const confirmButton = h('button', { class: 'danger', 'data-testid': 'confirm-ok', onclick: () => close(true) }, confirmLabel);
    const overlay = h('div', { class: 'modal-overlay', onclick: (e: Event) => { if (e.target === overlay) close(false); } },
      h('div', { class: 'modal', role: 'dialog', 'aria-modal': 'true' },
        h('h2', {}, title),
        h('p', {}, body),
        h('div', { class: 'modal-actions' },
          h('button', { 'data-testid': 'confirm-cancel', onclick: () => close(false) }, 'Cancel'),
          confirmButton)));
    document.body.append(overlay);
    document.addEventListener('keydown', onKey);
    confirmButton.focus();
  });
}
