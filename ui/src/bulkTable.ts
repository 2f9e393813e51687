// The Bulk view's table in plain functions (tested without a window): which
// columns a job's answers take, what a cell shows, and the progress line.
import type { AnswerFormat } from './answerFormat';

export type BulkRowStatus = 'pending' | 'done' | 'failed' | 'cancelled';

/** A row's result as the store keeps it (src-tauri BulkRowResult). */
export interface BulkRowResult {
  status: BulkRowStatus; answer: string; fields: unknown; error_code: string | null; error: string | null;
  prompt_tokens: number; generated_tokens: number; seconds: number;
}

/** The answer columns: the named fields, a schema's top-level properties,
 * or one "answer" column (as the bulk crate's Columns::for_format). */
export function answerColumns(format: AnswerFormat | null): string[] | null {
  if (!format || format.kind === 'json') return null;
  if (format.kind === 'fields') return format.names.map((n) => n.trim());
  const schema = format.schema as { properties?: Record<string, unknown> } | null;
  const names = schema && typeof schema.properties === 'object' && schema.properties ? Object.keys(schema.properties) : [];
  return names.length ? names : null;
}

/** A field's cell: text as it is, other JSON as JSON, missing as empty. */
export function fieldCell(fields: unknown, name: string): string {
  if (!fields || typeof fields !== 'object') return '';
  const v = (fields as Record<string, unknown>)[name];
  if (v === undefined || v === null) return '';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/** 75 → "1:15", 3725 → "1:02:05". */
export function clock(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const two = (n: number) => String(n).padStart(2, '0');
  if (s >= 3600) return `${Math.floor(s / 3600)}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
  return `${Math.floor(s / 60)}:${two(s % 60)}`;
}

/** "12 of 30 done · 2 failed · about 0:40 left". */
export function progressLine(done: number, failed: number, total: number, etaSeconds: number | null): string {
  const parts = [`${done} of ${total} done`];
  if (failed > 0) parts.push(`${failed} failed`);
  if (etaSeconds !== null && done + failed < total) parts.push(`about ${clock(etaSeconds)} left`);
  return parts.join(' · ');
}

/** Counts over a table's rows. */
export function counts(rows: { status: BulkRowStatus }[]): { done: number; failed: number; left: number } {
  let done = 0; let failed = 0;
  for (const r of rows) {
    if (r.status === 'done') done++;
    else if (r.status === 'failed') failed++;
  }
  return { done, failed, left: rows.length - done - failed };
}
