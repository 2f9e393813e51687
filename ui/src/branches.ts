// The ‹ 2/3 › switcher on a message that has siblings: the other answers to
// the same question (Regenerate keeps them) or the other versions of an
// edited message. Each arrow shows the neighbouring branch.
import type { Message } from './api';
import { h } from './dom';

/** Where `m` is among its siblings: 1-based position and count. */
export function branchPosition(m: Pick<Message, 'id' | 'siblings'>): { index: number; count: number } {
  const count = Math.max(1, m.siblings.length);
  const at = m.siblings.indexOf(m.id);
  return { index: at < 0 ? 1 : at + 1, count };
}

/** The sibling `step` places from `m` (−1: the one before), or null at either end. */
export function siblingAt(m: Pick<Message, 'id' | 'siblings'>, step: number): number | null {
  const at = m.siblings.indexOf(m.id);
  const next = m.siblings[at + step];
  return at < 0 || next === undefined ? null : next;
}

/** The switcher for `m`, or null when it has no siblings. `disabled`: the chat is answering. */
export function branchSwitcher(m: Message, choose: (id: number) => void, disabled = false): HTMLElement | null {
  const { index, count } = branchPosition(m);
  if (count < 2) return null;
  const what = m.role === 'user' ? 'version' : 'answer';
  const arrow = (step: number, glyph: string, label: string) => {
    const target = siblingAt(m, step);
    return h('button', {
      class: 'icon branch-arrow', 'data-testid': step < 0 ? 'branch-prev' : 'branch-next',
      'aria-label': `${label} ${what}`, title: `${label} ${what}`,
      disabled: disabled || target === null,
      onclick: () => { if (target !== null) choose(target); },
    }, glyph);
  };
  return h('span', { class: 'branches', role: 'group', 'aria-label': `${what} ${index} of ${count}`, 'data-testid': 'branches' },
    arrow(-1, '‹', 'Previous'),
    h('span', { class: 'branch-position', 'data-testid': 'branch-position' }, `${index}/${count}`),
    arrow(1, '›', 'Next'));
}
