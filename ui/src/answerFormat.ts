// A chat's answer format: free text, any JSON object, JSON with fields the
// user names, or a pasted JSON schema. The composer's { } button opens a
// small panel to choose it; the engine then decodes the chat's replies
// under that format (structured output), and such replies are shown as
// formatted JSON.
import { h } from './dom';

// generated from the bulk crate's AnswerFormat (ui/src/bindings)
import type { AnswerFormat } from './bindings/AnswerFormat';
import type { JsonValue } from './bindings/serde_json/JsonValue';
export type { AnswerFormat };

/** Field names typed as "city, country" (commas or new lines). */
export function parseFieldNames(text: string): string[] {
  return text.split(/[,\n]/).map((n) => n.trim()).filter((n) => n.length > 0);
}

/** A few words for the composer's foot. */
export function describeFormat(format: AnswerFormat | null): string {
  if (!format) return '';
  if (format.kind === 'json') return 'answers in JSON';
  if (format.kind === 'fields') return `answers in JSON: ${format.names.join(', ')}`;
  return 'answers by a JSON schema';
}

/** A reply that is all one JSON object or array, as a formatted code block;
 * anything else stays as it is. */
export function formattedJsonAnswer(text: string): string {
  const t = text.trim();
  if (!(t.startsWith('{') || t.startsWith('['))) return text;
  try {
    const value: unknown = JSON.parse(t);
    if (typeof value !== 'object' || value === null) return text;
    return '```json\n' + JSON.stringify(value, null, 2) + '\n```';
  } catch {
    return text;
  }
}

/** The panel: what the user chose, checked before it is applied. */
export function readFormat(kind: string, fields: string, schema: string): AnswerFormat | null | string {
  if (kind === 'text') return null;
  if (kind === 'json') return { kind: 'json' };
  if (kind === 'fields') {
    const names = parseFieldNames(fields);
    if (names.length === 0) return 'Name at least one field, e.g. city, country.';
    return { kind: 'fields', names };
  }
  try {
    const parsed: unknown = JSON.parse(schema);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return 'A JSON schema is an object, such as {"type": "object", …}.';
    return { kind: 'schema', schema: parsed as JsonValue };
  } catch (e) {
    return `This is not JSON: ${(e as Error).message}`;
  }
}

export class AnswerFormatPanel {
  readonly el: HTMLElement;
  private kind: HTMLSelectElement;
  private fields: HTMLInputElement;
  private schema: HTMLTextAreaElement;
  private error: HTMLElement;

  constructor(private apply: (format: AnswerFormat | null) => Promise<boolean>) {
    this.kind = h('select', { 'aria-label': 'Answer format', 'data-testid': 'answer-format-kind', onchange: () => this.sync() },
      h('option', { value: 'text' }, 'Text'),
      h('option', { value: 'json' }, 'JSON'),
      h('option', { value: 'fields' }, 'JSON with these fields'),
      h('option', { value: 'schema' }, 'JSON schema'));
    this.fields = h('input', { type: 'text', placeholder: 'city, country, population', 'aria-label': 'Field names', 'data-testid': 'answer-format-fields' });
    this.schema = h('textarea', { rows: 5, placeholder: '{"type": "object", "properties": {…}}', 'aria-label': 'JSON schema', 'data-testid': 'answer-format-schema' });
    this.error = h('div', { class: 'answer-format-error', role: 'alert', 'data-testid': 'answer-format-error' });
    const applyButton = h('button', { class: 'primary', 'data-testid': 'answer-format-apply', onclick: () => void this.submit() }, 'Apply');
    const cancel = h('button', { class: 'link', onclick: () => this.close() }, 'Cancel');
    this.el = h('div', { class: 'answer-format-panel', hidden: true, 'data-testid': 'answer-format-panel' },
      h('div', { class: 'answer-format-row' }, h('span', {}, 'Answer as'), this.kind, applyButton, cancel),
      this.fields,
      this.schema,
      h('p', { class: 'answer-format-help' }, 'The model can only answer in this shape (structured output), for this chat.'),
      this.error);
  }

  open(current: AnswerFormat | null): void {
    this.kind.value = current?.kind ?? 'text';
    this.fields.value = current?.kind === 'fields' ? current.names.join(', ') : '';
    this.schema.value = current?.kind === 'schema' ? JSON.stringify(current.schema, null, 2) : '';
    this.error.textContent = '';
    this.sync();
    this.el.hidden = false;
    this.kind.focus();
  }

  close(): void {
    this.el.hidden = true;
  }

  private sync(): void {
    this.fields.hidden = this.kind.value !== 'fields';
    this.schema.hidden = this.kind.value !== 'schema';
  }

  private async submit(): Promise<void> {
    const format = readFormat(this.kind.value, this.fields.value, this.schema.value);
    if (typeof format === 'string') {
      this.error.textContent = format;
      return;
    }
    if (await this.apply(format)) this.close();
  }
}
