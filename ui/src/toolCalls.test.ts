import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import { Streams } from './streams';
import { ChatView, prettyArguments, toolResult } from './chatView';
import { configFromForm, joinCommandLine, McpSection, parseValues, splitCommandLine, statusWords, unchanged } from './mcpSection';
import { readForm, chatSettingsDialog } from './chatSettingsView';
import type { Message, McpServerView } from './api';

const msg = (over: Partial<Message>): Message => ({
  id: 1, chat_id: 1, parent_id: null, siblings: [], role: 'user', content: '', reasoning: null, attachments: [], stats: null, model: null,
  status: 'complete', error: null, error_code: null, created_at: 0, updated_at: 0, tool_calls: [], tool_result: null, ...over,
});
afterEach(() => clearMocks());

const call = { id: 'call_1', name: 'read_text_file', arguments: '{"path":"/notes.txt"}', server: 'files' };

describe('a turn with tool calls', () => {
  it('stays running through the call, its result and the next answer', () => {
    const s = new Streams();
    const on = s.begin(1);
    on({ kind: 'started', chat_id: 1, reply_id: 10, model: 'm' });
    on({ kind: 'content', text: 'Let me look.' });
    const asked = msg({ id: 10, role: 'assistant', content: 'Let me look.', tool_calls: [call] });
    on({ kind: 'finished', message: asked });
    expect(s.isRunning(1)).toBe(true);
    on({ kind: 'tool_call', message_id: 10, call, needs_approval: true });
    expect(s.get(1)!.toolCall).toEqual({ messageId: 10, call, needsApproval: true });
    const result = msg({ id: 11, parent_id: 10, role: 'tool', content: 'buy milk', tool_result: { call_id: 'call_1', name: 'read_text_file', server: 'files', outcome: 'ok' } });
    on({ kind: 'tool_result', message: result });
    expect(s.get(1)!.toolCall).toBeNull();
    on({ kind: 'started', chat_id: 1, reply_id: 12, model: 'm' });
    expect(s.get(1)!.content).toBe('');
    on({ kind: 'content', text: 'Buy milk.' });
    const answer = msg({ id: 12, parent_id: 11, role: 'assistant', content: 'Buy milk.' });
    on({ kind: 'finished', message: answer });
    expect(s.isRunning(1)).toBe(false);
    expect(s.get(1)!.stored.map((m) => m.id)).toEqual([10, 11]);
  });

  it('shows a tool’s output as text, never as HTML', () => {
    const el = toolResult(msg({ role: 'tool', content: '<img src=x onerror=alert(1)><b>bold</b>', tool_result: { call_id: 'c', name: 'fetch', server: null, outcome: 'ok' } }));
    expect(el.querySelector('img')).toBeNull();
    expect(el.querySelector('b')).toBeNull();
    expect(el.querySelector('[data-testid=tool-output]')!.textContent).toBe('<img src=x onerror=alert(1)><b>bold</b>');
    const denied = toolResult(msg({ role: 'tool', content: 'The user denied this call.', tool_result: { call_id: 'c', name: 'fetch', server: null, outcome: 'denied' } }));
    expect(denied.dataset.outcome).toBe('denied');
    expect(denied.textContent).toContain('Denied:');
    expect(prettyArguments('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(prettyArguments('not json')).toBe('not json');
  });

  it('asks with Approve, Deny and Always allow while a call waits', () => {
    const answers: string[] = [];
    const view = new ChatView({
      regenerate: () => {}, edit: () => {}, continueReply: () => {}, sendStarter: () => {}, openModels: () => {}, switchBranch: () => {}, deleteBranch: () => {},
      answerToolCall: (id, d) => answers.push(`${id}:${d}`),
    });
    const asked = msg({ id: 10, role: 'assistant', tool_calls: [call] });
    const live = { chatId: 1, replyId: 10, model: 'm', content: '', reasoning: '', error: null, finished: null, stored: [asked], toolCall: { messageId: 10, call, needsApproval: true } };
    view.show([msg({ id: 9, role: 'user', content: 'notes?' }), asked], live);
    expect(view.el.querySelector('[data-testid=tool-call] code')!.textContent).toBe('read_text_file');
    const block = view.el.querySelector('[data-testid=tool-approval]')!;
    expect(block.querySelector('[data-testid=tool-args]')!.textContent).toContain('"/notes.txt"');
    (block.querySelector('[data-testid=tool-always-allow]') as HTMLButtonElement).click();
    expect(answers).toEqual(['call_1:always_allow']);
    expect((block.querySelector('[data-testid=tool-approve]') as HTMLButtonElement).disabled).toBe(true);
  });
});

describe('Settings → Tools (MCP)', () => {
  it('reads a command line or a URL into a server', () => {
    expect(splitCommandLine(`npx -y @modelcontextprotocol/server-filesystem "/Users/me/My Documents"`)).toEqual(['npx', '-y', '@modelcontextprotocol/server-filesystem', '/Users/me/My Documents']);
    expect(configFromForm('files', 'node server.js /tmp')).toEqual({ name: 'files', transport: { kind: 'stdio', command: 'node', args: ['server.js', '/tmp'], env: {} }, enabled: true, always_allow: [] });
    expect(configFromForm('web', 'https://example.com/mcp')).toMatchObject({ transport: { kind: 'http', url: 'https://example.com/mcp' } });
    expect(configFromForm('', 'x')).toBe('Give the server a name.');
    const view = (status: McpServerView['status'], tools = 0): McpServerView => ({
      config: { name: 'files', transport: { kind: 'stdio', command: 'x', args: [], env: {} }, enabled: true, always_allow: [] },
      status, tools: Array.from({ length: tools }, (_, i) => ({ name: `t${i}`, description: null, input_schema: {} })), stderr_tail: '', pid: null,
    });
    expect(statusWords(view({ state: 'ready' }, 14))).toBe('ready · 14 tools');
    expect(statusWords(view({ state: 'failed', reason: 'the server exited' }))).toBe('failed: the server exited');
  });

  it('reads the environment or headers typed one a line', () => {
    expect(parseValues('API_KEY=abc def\n\nDEBUG=1', false)).toEqual({ API_KEY: 'abc def', DEBUG: '1' });
    expect(parseValues('Authorization: Bearer x=y\nX-Team=blue', true)).toEqual({ Authorization: 'Bearer x=y', 'X-Team': 'blue' });
    expect(parseValues('KEY=\nno value here', false)).toBe('Line 2: write NAME=value.');
    expect(parseValues('=x', false)).toBe('Line 1: write NAME=value.');
    expect(configFromForm('files', 'node s.js', 'TOKEN=t0k')).toMatchObject({ transport: { kind: 'stdio', env: { TOKEN: 't0k' } } });
    expect(configFromForm('web', 'https://x/mcp', 'Authorization: Bearer t')).toMatchObject({ transport: { kind: 'http', headers: { Authorization: 'Bearer t' } } });
    expect(configFromForm('files', 'node s.js', 'oops')).toBe('Line 1: write NAME=value.');
    // an edit keeps the server's switch and the tools it always allows
    const base = { name: 'files', transport: { kind: 'stdio' as const, command: 'x', args: [], env: {} }, enabled: false, always_allow: ['read_file'] };
    expect(configFromForm('files', 'node s.js', '', base)).toMatchObject({ enabled: false, always_allow: ['read_file'] });
    // the form's command line reads back as the same words
    const words = ['node', '/my folder/s.js', '--flag', 'say "hi"', ''];
    expect(splitCommandLine(joinCommandLine(words))).toEqual(words);
    expect(unchanged({ ...base, transport: { kind: 'http', url: 'https://x', headers: { Authorization: '…abcd' } } }).transport)
      .toEqual({ kind: 'http', url: 'https://x', headers: { Authorization: '' } });
  });

  it('edits a server in place and switches one off, never sending the masked values back', async () => {
    const saved: unknown[] = [];
    const server: McpServerView = {
      config: { name: 'web', transport: { kind: 'http', url: 'https://x/mcp', headers: { Authorization: '…abcd' } }, enabled: true, always_allow: ['fetch'] },
      status: { state: 'ready' }, tools: [], stderr_tail: '', pid: null,
    };
    mockIPC((cmd, args) => {
      if (cmd === 'list_mcp_servers') return [server];
      if (cmd === 'save_mcp_server') {
        const config = (args as { config: McpServerView['config'] }).config;
        saved.push(config);
        return { ...server, config: { ...config, transport: { ...config.transport, headers: { Authorization: '…abcd', 'X-Team': '…blue' } } } };
      }
      return undefined;
    });
    const section = new McpSection(() => {});
    document.body.append(section.el);
    await section.refresh();
    const q = <T extends HTMLElement>(id: string) => section.el.querySelector(`[data-testid="${id}"]`) as T;
    expect(q('mcp-values-masked').textContent).toBe('Headers (in the keychain): Authorization …abcd');
    q<HTMLButtonElement>('mcp-edit').click();
    expect(q<HTMLInputElement>('mcp-name').value).toBe('web');
    expect(q<HTMLInputElement>('mcp-name').readOnly).toBe(true);
    expect(q<HTMLInputElement>('mcp-target').value).toBe('https://x/mcp');
    expect(q<HTMLTextAreaElement>('mcp-values').value).toBe('Authorization: ');
    q<HTMLTextAreaElement>('mcp-values').value = 'Authorization: \nX-Team: blue';
    q<HTMLButtonElement>('mcp-add').click();
    await new Promise((r) => setTimeout(r, 0));
    expect(saved[0]).toEqual({ name: 'web', transport: { kind: 'http', url: 'https://x/mcp', headers: { Authorization: '', 'X-Team': 'blue' } }, enabled: true, always_allow: ['fetch'] });
    expect(q<HTMLInputElement>('mcp-name').readOnly).toBe(false);
    expect(q<HTMLButtonElement>('mcp-add').textContent).toBe('Add server');
    // adding another server of the same name is refused before anything is sent
    q<HTMLInputElement>('mcp-name').value = 'web';
    q<HTMLInputElement>('mcp-target').value = 'https://y/mcp';
    q<HTMLButtonElement>('mcp-add').click();
    await new Promise((r) => setTimeout(r, 0));
    expect(saved.length).toBe(1);
    expect(q('mcp-problem').textContent).toMatch(/exists already/);
    // off: saved as it is (values empty: kept), switched off
    const on = q<HTMLInputElement>('mcp-enabled');
    expect(on.checked).toBe(true);
    on.checked = false;
    on.dispatchEvent(new Event('change'));
    await new Promise((r) => setTimeout(r, 0));
    expect(saved[1]).toEqual({ name: 'web', transport: { kind: 'http', url: 'https://x/mcp', headers: { Authorization: '', 'X-Team': '' } }, enabled: false, always_allow: ['fetch'] });
    section.el.remove();
  });

  it('a chat turns servers on in its settings, off by default', async () => {
    const dialog = chatSettingsDialog({
      global: {} as never, answerFormat: null, models: [], presets: [],
      own: { tools: { servers: [], disabled: ['web/fetch'], require_call: false } },
      mcpServers: [{ name: 'files', tools: 2, ready: true, toolNames: ['read_text_file', 'write_file'] }, { name: 'web', tools: 0, ready: false }],
    }, () => {});
    const form = document.querySelector('.chat-settings-form') as HTMLElement;
    const boxes = [...form.querySelectorAll<HTMLInputElement>('[data-testid=chat-tool-server]')];
    expect(boxes.map((b) => [b.value, b.checked])).toEqual([['files', false], ['web', false]]);
    expect(readForm(form).tools).toBeUndefined();
    boxes[0].checked = true;
    (form.querySelector('[data-testid=chat-tools-require]') as HTMLInputElement).checked = true;
    expect(readForm(form).tools).toEqual({ servers: ['files'], disabled: [], require_call: true });
    // a tool left out; one of a server not shown now stays left out
    (form.querySelector('[data-testid=chat-tool][value="files/write_file"]') as HTMLInputElement).checked = false;
    boxes[1].checked = true;
    expect(readForm(form).tools).toEqual({ servers: ['files', 'web'], disabled: ['web/fetch', 'files/write_file'], require_call: true });
    (document.querySelector('[data-testid=chat-settings-cancel]') as HTMLButtonElement).click();
    expect(await dialog).toBeNull();
  });
});
