import { describe, expect, it } from 'vitest';
import { AnswerFormatPanel, describeFormat, formattedJsonAnswer, parseFieldNames, readFormat, type AnswerFormat } from './answerFormat';

describe('answer format', () => {
  it('reads field names from commas and lines, dropping blanks', () => {
    expect(parseFieldNames(' city, country\npopulation ,, ')).toEqual(['city', 'country', 'population']);
  });

  it('checks what the panel holds before it is applied', () => {
    expect(readFormat('text', '', '')).toBeNull();
    expect(readFormat('json', '', '')).toEqual({ kind: 'json' });
    expect(readFormat('fields', 'a, b', '')).toEqual({ kind: 'fields', names: ['a', 'b'] });
    expect(readFormat('fields', ' , ', '')).toMatch(/at least one field/);
    expect(readFormat('schema', '', '{"type": "object"}')).toEqual({ kind: 'schema', schema: { type: 'object' } });
    expect(readFormat('schema', '', '[1]')).toMatch(/is an object/);
    expect(readFormat('schema', '', '{oops')).toMatch(/not JSON/);
  });

  it('shows a JSON reply formatted, and anything else as it is', () => {
    expect(formattedJsonAnswer('{"a": 1, "b": [2]}')).toBe('```json\n{\n  "a": 1,\n  "b": [\n    2\n  ]\n}\n```');
    expect(formattedJsonAnswer('Paris is the capital.')).toBe('Paris is the capital.');
    expect(formattedJsonAnswer('{"cut": "at the lim')).toBe('{"cut": "at the lim');
    expect(formattedJsonAnswer('42')).toBe('42');
    expect(describeFormat({ kind: 'fields', names: ['city', 'country'] })).toBe('answers in JSON: city, country');
    expect(describeFormat(null)).toBe('');
  });

  it('applies the chosen format and closes, or says what is wrong and stays open', async () => {
    const applied: (AnswerFormat | null)[] = [];
    const panel = new AnswerFormatPanel(async (f) => { applied.push(f); return true; });
    document.body.append(panel.el);
    panel.open({ kind: 'fields', names: ['city', 'country'] });
    const kind = panel.el.querySelector<HTMLSelectElement>('[data-testid="answer-format-kind"]')!;
    const fields = panel.el.querySelector<HTMLInputElement>('[data-testid="answer-format-fields"]')!;
    const apply = panel.el.querySelector<HTMLButtonElement>('[data-testid="answer-format-apply"]')!;
    expect(kind.value).toBe('fields');
    expect(fields.value).toBe('city, country');
    expect(fields.hidden).toBe(false);
    fields.value = '';
    apply.click();
    await Promise.resolve();
    expect(applied).toEqual([]);
    expect(panel.el.hidden).toBe(false);
    expect(panel.el.querySelector('[data-testid="answer-format-error"]')!.textContent).toMatch(/at least one field/);
    kind.value = 'text';
    kind.dispatchEvent(new Event('change'));
    expect(fields.hidden).toBe(true);
    apply.click();
    await new Promise((r) => setTimeout(r, 0));
    expect(applied).toEqual([null]);
    expect(panel.el.hidden).toBe(true);
  });
});
