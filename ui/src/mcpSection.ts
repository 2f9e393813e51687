// Settings → Tools (MCP): the MCP servers the app starts (a command whose
// stdio speaks MCP, or a streamable-HTTP URL), each with its state
// (starting, ready with N tools, failed with why and the end of its
// stderr), an On switch, Edit, Restart and Remove, its tools with their
// descriptions; a form to add or edit one (its environment or headers too,
// kept in the system keychain: the page only ever sees them masked, and an
// edit leaves a value it does not retype as it was), and an import of the
// mcp.json other apps keep (`mcpServers`).
// A new server is off in every chat until the chat turns it on (Chat settings).
// Everything a server says is shown as text.
import { api, errorText, type McpServerConfig, type McpServerView } from './api';
import { clear, h } from './dom';
import './tools.css';

/** "ready · 14 tools", "starting…", "failed: the server exited". */
export function statusWords(s: McpServerView): string {
  switch (s.status.state) {
    case 'ready': return `ready · ${s.tools.length} tool${s.tools.length === 1 ? '' : 's'}`;
    case 'starting': return 'starting…';
    case 'stopped': return 'off';
    case 'failed': return `failed: ${s.status.reason}`;
  }
}

/** Splits a command line typed in one field: words, with "…" or '…' kept whole. */
export function splitCommandLine(line: string): string[] {
  const out: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  for (let m = re.exec(line); m; m = re.exec(line)) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

/** A command line from its words, quoting those with spaces (the form's field when editing). */
export function joinCommandLine(words: string[]): string {
  return words.map((w) => (w === '' || /\s/.test(w) ? (w.includes('"') ? `'${w}'` : `"${w}"`) : w)).join(' ');
}

/** The environment (`NAME=value`) or headers (`Name: value`) typed one a line; an empty
 * value keeps the saved one when editing. Or why a line cannot be one. */
export function parseValues(text: string, http: boolean): Record<string, string> | string {
  const out: Record<string, string> = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    const at = http ? line.search(/[:=]/) : line.indexOf('=');
    const key = at > 0 ? line.slice(0, at).trim() : '';
    if (!key || /\s/.test(key)) return `Line ${i + 1}: write ${http ? 'Header-Name: value' : 'NAME=value'}.`;
    out[key] = line.slice(at + 1).trim();
  }
  return out;
}

/** The config the form describes, or why it cannot be one. `values`: the environment or
 * headers, one a line; `base`: the server being edited (its switch and allowed tools stay). */
export function configFromForm(name: string, target: string, values = '', base?: McpServerConfig): McpServerConfig | string {
  const n = name.trim();
  if (!n) return 'Give the server a name.';
  const t = target.trim();
  const keep = { enabled: base?.enabled ?? true, always_allow: base?.always_allow ?? [] };
  const http = /^https?:\/\//.test(t);
  const parsed = parseValues(values, http);
  if (typeof parsed === 'string') return parsed;
  if (http) return { name: n, transport: { kind: 'http', url: t, headers: parsed }, ...keep };
  const words = splitCommandLine(t);
  if (words.length === 0) return 'Type the command that starts the server, or its URL.';
  return { name: n, transport: { kind: 'stdio', command: words[0], args: words.slice(1), env: parsed }, ...keep };
}

/** A server's config to save again as it is: its values (masked on the page) sent empty, which keeps the saved ones. */
export function unchanged(config: McpServerConfig): McpServerConfig {
  const blank = (m: { [key in string]?: string }) => Object.fromEntries(Object.keys(m).map((k) => [k, '']));
  const t = config.transport;
  return { ...config, transport: t.kind === 'stdio' ? { ...t, env: blank(t.env) } : { ...t, headers: blank(t.headers) } };
}

/** The values' names as the form shows them when editing, each with an empty value (kept unless retyped). */
export function valuesText(config: McpServerConfig): string {
  const t = config.transport;
  return t.kind === 'stdio' ? Object.keys(t.env).map((k) => `${k}=`).join('\n') : Object.keys(t.headers).map((k) => `${k}: `).join('\n');
}

export class McpSection {
  readonly el: HTMLElement;
  private list = h('div', { class: 'mcp-servers', 'data-testid': 'mcp-servers' });
  private servers: McpServerView[] = [];
  private problem = h('div', { class: 'error-note', role: 'alert', hidden: true, 'data-testid': 'mcp-problem' });
  private name = h('input', { id: 'mcp-name', 'data-testid': 'mcp-name', placeholder: 'files', autocomplete: 'off' });
  private target = h('input', { id: 'mcp-target', 'data-testid': 'mcp-target', placeholder: 'npx -y @modelcontextprotocol/server-filesystem ~/Documents  or  https://…/mcp', autocomplete: 'off' });
  private values = h('textarea', { id: 'mcp-values', 'data-testid': 'mcp-values', rows: 2, placeholder: 'API_KEY=…  (a command)   or   Authorization: Bearer …  (a URL)', autocomplete: 'off', spellcheck: 'false' });
  private valuesHint = h('span', { class: 'hint', 'data-testid': 'mcp-values-hint' }, 'One a line; kept in the system keychain, never shown again.');
  private addButton = h('button', { 'data-testid': 'mcp-add', onclick: () => void this.add() }, 'Add server');
  private cancelButton = h('button', { class: 'link', 'data-testid': 'mcp-cancel-edit', hidden: true, onclick: () => this.endEdit() }, 'Cancel');
  /** The server the form edits (null: the form adds one). */
  private editing: McpServerView | null = null;

  constructor(private toast: (m: string) => void) {
    const { name, target } = this;
    const json = h('textarea', { id: 'mcp-json', 'data-testid': 'mcp-json', rows: 3, placeholder: '{"mcpServers": {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Documents"]}}}' });
    const importButton = h('button', { 'data-testid': 'mcp-import', onclick: () => void this.importJson(json) }, 'Import');
    this.el = h('section', { class: 'card settings-section', 'data-testid': 'mcp-section' },
      h('h2', {}, 'Tools (MCP)'),
      h('p', { class: 'hint' }, 'Servers whose tools a chat can offer its model (turn them on in a chat’s settings). Every call is shown and waits for your Approve unless you always allow that tool.'),
      this.list,
      h('div', { class: 'field field-text' },
        h('label', { for: 'mcp-name' }, 'Name', h('span', { class: 'hint' }, 'Letters, digits, - and _.')), name),
      h('div', { class: 'field field-text' },
        h('label', { for: 'mcp-target' }, 'Command or URL', h('span', { class: 'hint' }, 'The command that starts the server (its stdio speaks MCP), or a streamable-HTTP URL.')), target),
      h('div', { class: 'field field-text' },
        h('label', { for: 'mcp-values' }, 'Environment or headers', this.valuesHint), this.values),
      h('div', { class: 'row' }, this.addButton, this.cancelButton),
      h('div', { class: 'field field-text' },
        h('label', { for: 'mcp-json' }, 'Import mcp.json', h('span', { class: 'hint' }, 'Paste the "mcpServers" of Claude Desktop, Cursor or LM Studio.')), json),
      h('div', { class: 'row' }, importButton),
      this.problem);
  }

  async refresh(): Promise<void> {
    try {
      const servers = await api.listMcpServers();
      this.servers = Array.isArray(servers) ? servers : [];
    } catch (e) {
      this.toast(errorText(e));
    }
    this.render();
  }

  /** One server's state changed (the `mcp-changed` event). */
  update(server: McpServerView): void {
    const at = this.servers.findIndex((s) => s.config.name === server.config.name);
    if (at >= 0) this.servers[at] = server;
    else this.servers.push(server);
    if (this.el.isConnected) this.render();
  }

  private say(problem: string | null): void {
    this.problem.hidden = !problem;
    this.problem.textContent = problem ?? '';
  }

  /** Adds the form's server, or saves the one it edits. */
  private async add(): Promise<void> {
    const editing = this.editing;
    if (!editing && this.servers.some((s) => s.config.name === this.name.value.trim())) {
      return this.say(`A server named ${this.name.value.trim()} exists already: Edit it, or choose another name.`);
    }
    const config = configFromForm(this.name.value, this.target.value, this.values.value, editing?.config);
    if (typeof config === 'string') return this.say(config);
    try {
      this.update(await api.saveMcpServer(config));
      this.endEdit();
      this.say(null);
    } catch (e) {
      this.say(errorText(e));
    }
  }

  /** Fills the form with server `s` to change it in place (its name stays). */
  private edit(s: McpServerView): void {
    const t = s.config.transport;
    this.editing = s;
    this.name.value = s.config.name;
    this.name.readOnly = true;
    this.target.value = t.kind === 'stdio' ? joinCommandLine([t.command, ...t.args]) : t.url;
    this.values.value = valuesText(s.config);
    const masked = Object.entries(t.kind === 'stdio' ? t.env : t.headers).map(([k, v]) => `${k} ${v}`);
    this.valuesHint.textContent = masked.length
      ? `One a line; a value left empty stays as saved (${masked.join(', ')}).`
      : 'One a line; kept in the system keychain, never shown again.';
    this.addButton.textContent = `Save ${s.config.name}`;
    this.cancelButton.hidden = false;
    this.target.focus();
  }

  private endEdit(): void {
    this.editing = null;
    this.name.readOnly = false;
    for (const field of [this.name, this.target, this.values]) field.value = '';
    this.valuesHint.textContent = 'One a line; kept in the system keychain, never shown again.';
    this.addButton.textContent = 'Add server';
    this.cancelButton.hidden = true;
  }

  /** Switches a server on or off (kept; off stops it). */
  private async setEnabled(s: McpServerView, enabled: boolean): Promise<void> {
    try {
      this.update(await api.saveMcpServer({ ...unchanged(s.config), enabled }));
      this.say(null);
    } catch (e) {
      this.say(errorText(e));
      this.render();
    }
  }

  private async importJson(json: HTMLTextAreaElement): Promise<void> {
    try {
      this.servers = await api.importMcpServers(json.value);
      json.value = '';
      this.say(null);
      this.render();
    } catch (e) {
      this.say(errorText(e));
    }
  }

  private render(): void {
    clear(this.list);
    if (this.servers.length === 0) this.list.append(h('div', { class: 'muted' }, 'No servers yet.'));
    for (const s of this.servers) this.list.append(this.server(s));
  }

  private server(s: McpServerView): HTMLElement {
    const name = s.config.name;
    const t = s.config.transport;
    const where = t.kind === 'stdio' ? [t.command, ...t.args].join(' ') : t.url;
    const restart = h('button', { 'data-testid': 'mcp-restart', onclick: async () => {
      try { this.update(await api.restartMcpServer(name)); } catch (e) { this.say(errorText(e)); }
    } }, 'Restart');
    const remove = h('button', { class: 'link', 'data-testid': 'mcp-remove', onclick: async () => {
      try {
        await api.removeMcpServer(name);
        this.servers = this.servers.filter((x) => x.config.name !== name);
        this.render();
      } catch (e) { this.say(errorText(e)); }
    } }, 'Remove');
    const edit = h('button', { class: 'link', 'data-testid': 'mcp-edit', onclick: () => this.edit(s) }, 'Edit');
    const on: HTMLInputElement = h('input', { type: 'checkbox', 'data-testid': 'mcp-enabled', 'aria-label': `${name} on`, onchange: () => void this.setEnabled(s, on.checked) });
    on.checked = s.config.enabled;
    const values = Object.entries(t.kind === 'stdio' ? t.env : t.headers);
    const failed = s.status.state === 'failed';
    return h('div', { class: `mcp-server mcp-${s.status.state}`, 'data-testid': 'mcp-server', 'data-name': name, 'data-state': s.status.state },
      h('div', { class: 'mcp-server-head' }, h('label', { class: 'mcp-on', title: 'Off: kept, not started' }, on, h('strong', {}, name)), ' ',
        h('span', { class: failed ? 'error-note inline' : 'muted', 'data-testid': 'mcp-status', role: 'status' }, statusWords(s)),
        ' ', s.config.enabled ? restart : null, ' ', edit, ' ', remove),
      h('div', { class: 'muted' }, h('code', {}, where)),
      values.length ? h('div', { class: 'muted', 'data-testid': 'mcp-values-masked' },
        `${t.kind === 'stdio' ? 'Environment' : 'Headers'} (in the keychain): ${values.map(([k, v]) => `${k} ${v}`).join(', ')}`) : null,
      failed && s.stderr_tail ? h('pre', { class: 'mcp-stderr', 'data-testid': 'mcp-stderr' }, s.stderr_tail) : null,
      s.tools.length ? h('details', { class: 'mcp-tools' }, h('summary', {}, `Tools (${s.tools.length})`),
        h('ul', {}, ...s.tools.map((tool) => h('li', { 'data-testid': 'mcp-tool' }, h('code', {}, tool.name),
          tool.description ? ` — ${tool.description}` : '',
          s.config.always_allow.includes(tool.name) ? h('span', { class: 'muted' }, ' (always allowed)') : null)))) : null);
  }
}
