import { describe, expect, it } from 'vitest';
import { answerColumns, clock, counts, fieldCell, progressLine } from './bulkTable';

describe('the bulk table', () => {
  it('splits answers into the named fields or a schema\'s properties, else keeps them whole', () => {
    expect(answerColumns(null)).toBeNull();
    expect(answerColumns({ kind: 'json' })).toBeNull();
    expect(answerColumns({ kind: 'fields', names: [' colour', 'shape '] })).toEqual(['colour', 'shape']);
    expect(answerColumns({ kind: 'schema', schema: { type: 'object', properties: { zebra: {}, apple: {} } } })).toEqual(['zebra', 'apple']);
    expect(answerColumns({ kind: 'schema', schema: { type: 'object' } })).toBeNull();
  });

  it('shows a field as text, other JSON as JSON, and nothing for a missing one', () => {
    const fields = { colour: 'red', count: 3, tags: ['a'], none: null };
    expect(fieldCell(fields, 'colour')).toBe('red');
    expect(fieldCell(fields, 'count')).toBe('3');
    expect(fieldCell(fields, 'tags')).toBe('["a"]');
    expect(fieldCell(fields, 'none')).toBe('');
    expect(fieldCell(fields, 'gone')).toBe('');
    expect(fieldCell(null, 'colour')).toBe('');
  });

  it('says how far a job is and how long it has left', () => {
    expect(clock(75)).toBe('1:15');
    expect(clock(3725)).toBe('1:02:05');
    expect(progressLine(12, 2, 30, 40)).toBe('12 of 30 done · 2 failed · about 0:40 left');
    expect(progressLine(28, 2, 30, 0)).toBe('28 of 30 done · 2 failed');
    expect(progressLine(0, 0, 30, null)).toBe('0 of 30 done');
    expect(counts([{ status: 'done' }, { status: 'failed' }, { status: 'pending' }, { status: 'cancelled' }])).toEqual({ done: 1, failed: 1, left: 2 });
  });
});
