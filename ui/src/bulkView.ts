// The Bulk page: drop many images (or a folder), ask one question about
// every one, and watch a table fill as the engine answers them in one
// continuous batch. Jobs are kept: an interrupted one resumes, failed rows
// can be retried, and the table exports as CSV or JSON Lines.
import { api, attachmentUrl, errorText, type BulkEvent, type BulkJob, type BulkRow } from './api';
import { PDF_MIME } from './documentChip';
import { readFormat, type AnswerFormat } from './answerFormat';
import { answerColumns, counts, fieldCell, progressLine } from './bulkTable';
import { whyCannotRun, type BulkModel } from './bulkReadiness';
import { clear, h } from './dom';
import { confirmDialog } from './modal';

const STATUS_WORDS: Record<string, string> = {
  ready: 'not run yet', running: 'running', finished: 'finished', cancelled: 'cancelled', interrupted: 'interrupted (the app stopped): resume to finish',
};

export class BulkView {
  readonly el: HTMLElement;
  private paths: string[] = [];
  private jobs: BulkJob[] = [];
  private job: BulkJob | null = null;
  private rows: BulkRow[] = [];
  private eta: number | null = null;
  /** The last export's path, of the job it is of (another job does not show it). */
  private exported: { jobId: number; path: string } | null = null;
  private model: BulkModel | null = null;
  private runButton: HTMLButtonElement;
  /** Why Run is off (no model, one that reads text only), beside it. */
  private runBlocked = h('div', { class: 'muted small bulk-run-blocked', 'data-testid': 'bulk-run-blocked', role: 'status', hidden: true });
  /** Jobs whose run streams to this page; one running elsewhere (started
   * before a reload) is followed by reading its rows again every second. */
  private streaming = new Set<number>();
  private pollTimer: number | null = null;
  private prompt: HTMLTextAreaElement;
  private kind: HTMLSelectElement;
  private fields: HTMLInputElement;
  private schema: HTMLTextAreaElement;
  private maxTokens: HTMLInputElement;
  private formError = h('div', { class: 'error-note', role: 'alert', hidden: true, 'data-testid': 'bulk-form-error' });
  private dropped = h('div', { class: 'bulk-drop', 'data-testid': 'bulk-drop' });
  private jobList = h('div', { class: 'bulk-jobs', 'data-testid': 'bulk-jobs' });
  private jobPane = h('section', { class: 'bulk-job', 'aria-live': 'off' });

  constructor(private opts: { pickFiles(): Promise<string[]>; toast(m: string): void }) {
    this.prompt = h('textarea', { rows: 2, placeholder: 'What do you want to know about each image?', 'aria-label': 'Prompt for every image', 'data-testid': 'bulk-prompt' });
    this.kind = h('select', { 'aria-label': 'Answer format', 'data-testid': 'bulk-format-kind', onchange: () => this.syncFormat() },
      h('option', { value: 'text' }, 'Text'),
      h('option', { value: 'fields' }, 'Columns (JSON fields)'),
      h('option', { value: 'json' }, 'JSON'),
      h('option', { value: 'schema' }, 'JSON schema'));
    this.fields = h('input', { type: 'text', placeholder: 'colour, objects, mood', 'aria-label': 'Column names', 'data-testid': 'bulk-format-fields' });
    this.schema = h('textarea', { rows: 4, placeholder: '{"type": "object", "properties": {…}}', 'aria-label': 'JSON schema', 'data-testid': 'bulk-format-schema' });
    this.maxTokens = h('input', { type: 'number', min: 1, max: 8192, value: 256, 'aria-label': 'Most tokens per answer', 'data-testid': 'bulk-max-tokens' });
    this.runButton = h('button', { class: 'primary', 'data-testid': 'bulk-run', onclick: () => void this.createAndRun() }, 'Run');
    const form = h('div', { class: 'card bulk-form' },
      this.dropped,
      h('div', { class: 'bulk-form-row' },
        h('button', { 'data-testid': 'bulk-add', onclick: () => void this.pick() }, 'Add images…'),
        h('button', { class: 'link', onclick: () => { this.paths = []; this.renderDropped(); } }, 'Clear')),
      this.prompt,
      h('div', { class: 'bulk-form-row' },
        h('label', {}, 'Answer as ', this.kind),
        h('label', {}, 'Most tokens ', this.maxTokens),
        this.runButton),
      this.runBlocked,
      this.fields,
      this.schema,
      this.formError);
    this.el = h('div', { class: 'page bulk-page', 'data-testid': 'bulk-page' },
      h('h2', {}, 'Bulk'),
      h('p', { class: 'muted small' }, 'Ask one question about many images: drop them (or a folder) here. Every image is answered in one continuous batch; the table fills as answers arrive.'),
      form,
      this.jobList,
      this.jobPane);
    this.syncFormat();
    this.renderDropped();
  }

  /** The model that would answer (null: none loaded): Run is off, saying why, for one that cannot see images. */
  setModel(model: BulkModel | null): void {
    this.model = model;
    const why = whyCannotRun(model);
    this.runButton.disabled = why !== null;
    this.runBlocked.textContent = why ?? '';
    this.runBlocked.hidden = why === null;
    this.renderJob();
  }

  /** Dropped files and folders (a folder's images are taken when the job is made). */
  addPaths(paths: string[]): void {
    for (const p of paths) if (!this.paths.includes(p)) this.paths.push(p);
    this.renderDropped();
  }

  async refresh(): Promise<void> {
    try {
      this.jobs = await api.listBulkJobs();
      if (!this.job && this.jobs.length) await this.open(this.jobs[0]);
      else if (this.job) await this.open(this.jobs.find((j) => j.id === this.job!.id) ?? this.job);
    } catch (e) {
      this.opts.toast(errorText(e));
    }
    this.renderJobs();
  }

  private syncFormat(): void {
    this.fields.hidden = this.kind.value !== 'fields';
    this.schema.hidden = this.kind.value !== 'schema';
  }

  private async pick(): Promise<void> {
    this.addPaths(await this.opts.pickFiles());
  }

  private renderDropped(): void {
    clear(this.dropped);
    if (!this.paths.length) {
      this.dropped.append(h('span', { class: 'muted' }, 'Drop images or a folder anywhere on this page.'));
      return;
    }
    const names = this.paths.map((p) => p.split(/[\\/]/).pop() ?? p);
    const shown = names.slice(0, 6).join(', ') + (names.length > 6 ? `, … (${names.length} in all)` : '');
    this.dropped.append(h('span', { 'data-testid': 'bulk-dropped' }, `${this.paths.length} dropped: ${shown}`));
  }

  private showFormError(message: string): void {
    this.formError.textContent = message;
    this.formError.hidden = !message;
  }

  private async createAndRun(): Promise<void> {
    if (whyCannotRun(this.model)) return;
    const prompt = this.prompt.value.trim();
    if (!this.paths.length) return this.showFormError('Drop some images (or a folder) first.');
    if (!prompt) return this.showFormError('Write the question to ask about every image.');
    const format = readFormat(this.kind.value, this.fields.value, this.schema.value);
    if (typeof format === 'string') return this.showFormError(format);
    this.showFormError('');
    try {
      const job = await api.createBulkJob(prompt, format as AnswerFormat | null, Number(this.maxTokens.value) || null, this.paths);
      this.paths = [];
      this.renderDropped();
      await this.open(job);
      await this.run('unfinished');
    } catch (e) {
      this.showFormError(errorText(e));
    }
  }

  private async open(job: BulkJob): Promise<void> {
    this.job = job;
    this.rows = await api.bulkJobRows(job.id);
    this.renderJobs();
    this.renderJob();
  }

  private async run(pass: 'unfinished' | 'failed'): Promise<void> {
    const job = this.job;
    if (!job) return;
    if (pass === 'failed') for (const r of this.rows) if (r.status === 'failed' && r.image) Object.assign(r, pending());
    this.eta = null;
    try {
      this.streaming.add(job.id);
      this.job = await api.runBulkJob(job.id, pass, (e) => this.onEvent(job.id, e));
    } catch (e) {
      this.streaming.delete(job.id);
      this.opts.toast(errorText(e));
      this.rows = await api.bulkJobRows(job.id);
    }
    this.renderJob();
    void this.refreshList();
  }

  private onEvent(jobId: number, e: BulkEvent): void {
    if (this.job?.id !== jobId) return;
    if (e.kind === 'row') {
      const row = this.rows.find((r) => r.position === e.position);
      if (row) Object.assign(row, e.row);
      this.eta = e.eta_seconds;
      this.renderJob();
    } else {
      this.streaming.delete(jobId);
      this.job = e.job;
      this.eta = null;
      this.renderJob();
      void this.refreshList();
    }
  }

  private async refreshList(): Promise<void> {
    try { this.jobs = await api.listBulkJobs(); } catch { /* the list stays as it was */ }
    this.renderJobs();
  }

  private renderJobs(): void {
    clear(this.jobList);
    if (this.jobs.length < 2) return;
    this.jobList.append(h('span', { class: 'label' }, 'Jobs'), ...this.jobs.map((j) => h('button', {
      class: `bulk-job-item${this.job?.id === j.id ? ' selected' : ''}`, 'data-testid': 'bulk-job-item',
      'aria-current': this.job?.id === j.id ? 'true' : undefined, title: j.prompt, onclick: () => void this.open(j),
    }, `${j.prompt.slice(0, 40)} (${j.done}/${j.total})`)));
  }

  private async export(format: 'csv' | 'jsonl'): Promise<void> {
    if (!this.job) return;
    const jobId = this.job.id;
    try {
      this.exported = { jobId, path: await api.exportBulkJob(jobId, format) };
    } catch (e) {
      this.opts.toast(errorText(e));
    }
    this.renderJob();
  }

  /** A job running without this page's stream: read it again in a second. */
  private follow(job: BulkJob): void {
    if (this.pollTimer !== null || job.status !== 'running' || this.streaming.has(job.id)) return;
    this.pollTimer = window.setTimeout(() => {
      this.pollTimer = null;
      if (this.job?.id === job.id && this.el.isConnected) void this.refresh();
    }, 1000);
  }

  private async remove(job: BulkJob): Promise<void> {
    if (!await confirmDialog('Delete this job?', `“${job.prompt.slice(0, 60)}” and its table will be deleted (images no chat uses go too).`, 'Delete')) return;
    try {
      await api.deleteBulkJob(job.id);
      this.job = null;
      this.rows = [];
      clear(this.jobPane);
      await this.refresh();
    } catch (e) {
      this.opts.toast(errorText(e));
    }
  }

  private renderJob(): void {
    clear(this.jobPane);
    const job = this.job;
    if (!job) return;
    this.follow(job);
    const running = job.status === 'running';
    const { done, failed, left } = counts(this.rows);
    const blocked = whyCannotRun(this.model);
    const bar = h('progress', { max: this.rows.length, value: done + failed, 'aria-label': 'Images answered', 'data-testid': 'bulk-progress' });
    const actions = h('div', { class: 'bulk-actions' },
      running ? h('button', { 'data-testid': 'bulk-cancel', onclick: () => void api.cancelBulkJob(job.id) }, 'Cancel') : null,
      // one "Run" on the page (the form's): a job that never ran is started here
      !running && left > 0 ? h('button', { class: 'primary', 'data-testid': 'bulk-resume', disabled: blocked !== null, title: blocked ?? '', onclick: () => void this.run('unfinished') }, job.status === 'ready' ? 'Start' : 'Resume') : null,
      !running && this.rows.some((r) => r.status === 'failed' && r.image) ? h('button', { 'data-testid': 'bulk-retry', disabled: blocked !== null, title: blocked ?? '', onclick: () => void this.run('failed') }, 'Retry failed') : null,
      h('button', { 'data-testid': 'bulk-export-csv', onclick: () => void this.export('csv') }, 'Export CSV'),
      h('button', { 'data-testid': 'bulk-export-jsonl', onclick: () => void this.export('jsonl') }, 'Export JSON Lines'),
      running ? null : h('button', { class: 'link', 'data-testid': 'bulk-delete', onclick: () => void this.remove(job) }, 'Delete'));
    this.jobPane.append(
      h('div', { class: 'bulk-job-head' },
        h('div', {}, h('div', { class: 'bulk-job-prompt' }, job.prompt),
          h('div', { class: 'muted small', 'data-testid': 'bulk-status' }, `${STATUS_WORDS[job.status] ?? job.status}${job.model ? ` · ${job.model}` : ''}`)),
        actions),
      h('div', { class: 'bulk-progress-row' }, bar,
        h('span', { class: 'small', 'data-testid': 'bulk-progress-text', role: 'status' }, progressLine(done, failed, this.rows.length, running ? this.eta : null))),
      ...(this.exported?.jobId === job.id ? [h('div', { class: 'ok-note', 'data-testid': 'bulk-exported' }, `Saved to ${this.exported.path}`)] : []),
      this.table(job));
  }

  private table(job: BulkJob): HTMLElement {
    const columns = answerColumns(job.answer_format);
    const head = h('tr', {}, h('th', {}, ''), h('th', {}, 'Image'), h('th', {}, 'Status'),
      ...(columns ?? ['Answer']).map((c) => h('th', {}, c)), h('th', {}, 'Tokens'), h('th', {}, 'Time'));
    const body = h('tbody', {}, ...this.rows.map((r) => h('tr', { 'data-testid': 'bulk-row', 'data-status': r.status },
      // a PDF's row shows a badge: the web view cannot draw a PDF as an image
      h('td', {}, r.image?.mime === PDF_MIME ? h('span', { class: 'doc-icon bulk-doc', 'data-testid': 'bulk-doc', title: 'PDF document' }, 'PDF')
        : r.image ? h('img', { class: 'bulk-thumb', src: attachmentUrl(r.image.sha256), alt: '', loading: 'lazy' }) : null),
      h('td', { class: 'bulk-name' }, r.name),
      h('td', { class: `bulk-status bulk-${r.status}` }, r.status),
      ...(r.status === 'failed'
        ? [h('td', { class: 'bulk-error', colspan: (columns ?? ['a']).length, title: r.error_code ?? '' }, r.error ?? r.error_code ?? 'failed')]
        : (columns ? columns.map((c) => h('td', {}, clamped(fieldCell(r.fields, c)))) : [h('td', { class: 'bulk-answer' }, clamped(r.answer))])),
      h('td', { class: 'small muted' }, r.status === 'done' ? `${r.prompt_tokens} → ${r.generated_tokens}` : ''),
      h('td', { class: 'small muted' }, r.status === 'done' ? `${r.seconds.toFixed(1)} s` : ''))));
    return h('div', { class: 'bulk-table-wrap' }, h('table', { class: 'bulk-table', 'data-testid': 'bulk-table' }, h('thead', {}, head), body));
  }
}

function pending() {
  return { status: 'pending' as const, answer: '', fields: null, error_code: null, error: null, prompt_tokens: 0, generated_tokens: 0, seconds: 0 };
}

/** A long answer shows its first lines; a click (or Enter) shows it whole,
 * another folds it again: one long answer no longer makes a row a page tall. */
export function clamped(text: string): HTMLElement {
  const cell = h('div', { class: 'bulk-clamp', title: 'Click to show it whole' }, text);
  if (text.length <= 160 && text.split('\n').length <= 3) return cell;
  cell.tabIndex = 0;
  cell.setAttribute('role', 'button');
  cell.setAttribute('aria-expanded', 'false');
  const toggle = () => {
    const open = !cell.classList.contains('expanded');
    cell.classList.toggle('expanded', open);
    cell.setAttribute('aria-expanded', String(open));
  };
  cell.addEventListener('click', toggle);
  cell.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(); } });
  return cell;
}
