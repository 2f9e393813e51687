// Settings → Tools (MCP): the MCP servers the app starts (a command whose
// stdio speaks MCP, or a streamable-HTTP URL), each with its state
// (starting, ready with N tools, failed with why and the end of its
// stderr), Restart and Remove, its tools with their descriptions; a form to
// add one, and an import of the mcp.json other apps keep (`mcpServers`).
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

/** The config the add form describes, or why it cannot be one. */
export function configFromForm(name: string, target: string): McpServerConfig | string {
  const n = name.trim();
  if (!n) return 'Give the server a name.';
  const t = target.trim();
  if (/^https?:\/\//.test(t)) return { name: n, transport: { kind: 'http', url: t, headers: {} }, enabled: true, always_allow: [] };
  const words = splitCommandLine(t);
  if (words.length === 0) return 'Type the command that starts the server, or its URL.';
  return { name: n, transport: { kind: 'stdio', command: words[0], args: words.slice(1), env: {} }, enabled: true, always_allow: [] };
}

export class McpSection {
  readonly el: HTMLElement;
  private list = h('div', { class: 'mcp-servers', 'data-testid': 'mcp-servers' });
  private servers: McpServerView[] = [];
  private problem = h('div', { class: 'error-note', role: 'alert', hidden: true, 'data-testid': 'mcp-problem' });

  constructor(private toast: (m: string) => void) {
    const name = h('input', { id: 'mcp-name', 'data-testid': 'mcp-name', placeholder: 'files', autocomplete: 'off' });
    const target = h('input', { id: 'mcp-target', 'data-testid': 'mcp-target', placeholder: 'npx -y @modelcontextprotocol/server-filesystem ~/Documents  or  https://…/mcp', autocomplete: 'off' });
    const add = h('button', { 'data-testid': 'mcp-add', onclick: () => void this.add(name, target) }, 'Add server');
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
      h('div', { class: 'row' }, add),
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

  private async add(name: HTMLInputElement, target: HTMLInputElement): Promise<void> {
    const config = configFromForm(name.value, target.value);
    if (typeof config === 'string') return this.say(config);
    try {
      this.update(await api.saveMcpServer(config));
      name.value = '';
      target.value = '';
      this.say(null);
    } catch (e) {
      this.say(errorText(e));
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
    const failed = s.status.state === 'failed';
    return h('div', { class: `mcp-server mcp-${s.status.state}`, 'data-testid': 'mcp-server', 'data-name': name, 'data-state': s.status.state },
      h('div', { class: 'mcp-server-head' }, h('strong', {}, name), ' ',
        h('span', { class: failed ? 'error-note inline' : 'muted', 'data-testid': 'mcp-status', role: 'status' }, statusWords(s)),
        ' ', restart, ' ', remove),
      h('div', { class: 'muted' }, h('code', {}, where)),
      failed && s.stderr_tail ? h('pre', { class: 'mcp-stderr', 'data-testid': 'mcp-stderr' }, s.stderr_tail) : null,
      s.tools.length ? h('details', { class: 'mcp-tools' }, h('summary', {}, `Tools (${s.tools.length})`),
        h('ul', {}, ...s.tools.map((tool) => h('li', { 'data-testid': 'mcp-tool' }, h('code', {}, tool.name),
          tool.description ? ` — ${tool.description}` : '',
          s.config.always_allow.includes(tool.name) ? h('span', { class: 'muted' }, ' (always allowed)') : null)))) : null);
  }
}
