import { describe, expect, it } from 'vitest';
import { answerPending, Streams } from './streams';
import type { Message } from './api';

describe('Streams', () => {
  it('keeps each chat’s reply apart and ends it on finished', () => {
    const s = new Streams();
    const seen: number[] = [];
    s.subscribe((chatId) => seen.push(chatId));
    const a = s.begin(1);
    const b = s.begin(2);
    a({ kind: 'started', chat_id: 1, reply_id: 10, model: 'm' });
    a({ kind: 'reasoning', text: 'hmm ' });
    a({ kind: 'content', text: 'Hel' });
    b({ kind: 'content', text: 'Other' });
    a({ kind: 'content', text: 'lo' });
    expect(s.get(1)!.content).toBe('Hello');
    expect(s.get(1)!.reasoning).toBe('hmm ');
    expect(s.get(2)!.content).toBe('Other');
    expect(s.runningChats().sort()).toEqual([1, 2]);
    a({ kind: 'finished', message: { id: 10 } as Message });
    expect(s.isRunning(1)).toBe(false);
    expect(s.runningChats()).toEqual([2]);
    s.settle(1);
    expect(s.get(1)).toBeUndefined();
    expect(seen.filter((c) => c === 1).length).toBeGreaterThan(3);
  });

  it('ignores events of a reply replaced by a newer one', () => {
    const s = new Streams();
    const old = s.begin(1);
    s.begin(1);
    old({ kind: 'content', text: 'stale' });
    expect(s.get(1)!.content).toBe('');
  });

  it('takes a snapshot when re-attaching after a reload', () => {
    const s = new Streams();
    const h = s.begin(3);
    h({ kind: 'snapshot', content: 'so far', reasoning: 'r' });
    h({ kind: 'content', text: ' more' });
    expect(s.get(3)!.content).toBe('so far more');
  });
});

describe('answerPending', () => {
  it('is true while a running reply has nothing to show', () => {
    const s = new Streams();
    const on = s.begin(1);
    on({ kind: 'started', chat_id: 1, reply_id: 2, model: 'm' });
    expect(answerPending(s.get(1)!, s.isRunning(1))).toBe(true);
    on({ kind: 'reasoning', text: 'hmm' });
    expect(answerPending(s.get(1)!, s.isRunning(1))).toBe(false);
    const other = s.begin(2);
    other({ kind: 'error', error: { code: 'X', message: 'bad' } as never });
    expect(answerPending(s.get(2)!, s.isRunning(2))).toBe(false);
    s.begin(3);
    const abandoned = s.get(3)!;
    s.abandon(3);
    expect(answerPending(abandoned, s.isRunning(3))).toBe(false);
  });
});
