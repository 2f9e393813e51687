import { describe, expect, it } from 'vitest';
import { branchPosition, branchSwitcher, siblingAt } from './branches';
import type { Message } from './api';

const at = (id: number, siblings: number[]) => ({ id, siblings });

describe('branch switcher', () => {
  it('places a message among its siblings and finds its neighbours', () => {
    expect(branchPosition(at(5, [2, 5, 9]))).toEqual({ index: 2, count: 3 });
    expect(siblingAt(at(5, [2, 5, 9]), -1)).toBe(2);
    expect(siblingAt(at(5, [2, 5, 9]), 1)).toBe(9);
    expect(siblingAt(at(9, [2, 5, 9]), 1)).toBeNull();
    expect(siblingAt(at(2, [2, 5, 9]), -1)).toBeNull();
    // a message whose siblings were not filled in counts as alone
    expect(branchPosition(at(7, []))).toEqual({ index: 1, count: 1 });
  });

  it('disables the arrows at the ends and while the chat answers', () => {
    const m = { ...at(2, [2, 5]), role: 'assistant' } as Message;
    const el = branchSwitcher(m, () => {})!;
    expect((el.querySelector('[data-testid=branch-prev]') as HTMLButtonElement).disabled).toBe(true);
    expect((el.querySelector('[data-testid=branch-next]') as HTMLButtonElement).disabled).toBe(false);
    expect(el.getAttribute('aria-label')).toBe('answer 1 of 2');
    const busy = branchSwitcher(m, () => {}, true)!;
    expect((busy.querySelector('[data-testid=branch-next]') as HTMLButtonElement).disabled).toBe(true);
    expect(branchSwitcher({ ...m, siblings: [2] }, () => {})).toBeNull();
  });
});
