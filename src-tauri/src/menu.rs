//! The menu bar. The app's own items (New Chat, Search chats, Stop…) do
//! nothing here: each sends its action's name to the web UI, which runs the
//! same code its buttons and keyboard shortcuts run (`App.run` in
//! ui/src/app.ts), so every action has one implementation. Edit and Window
//! items are the system's own (undo, copy, minimize…).
//!
//! macOS: the App menu (About, Settings… ⌘,, Hide, Quit ⌘Q), File, Edit,
//! Chat and Window (with the window list). Linux (GTK): GTK has only cut,
//! copy, paste, select all and About among the predefined items (muda shows
//! the others greyed out), so Linux gets those, Settings… in Edit, Quit in
//! File and About in Help, as GNOME apps have them. CmdOrCtrl is ⌘ on a
//! Mac and Ctrl on Linux.
use tauri::menu::{AboutMetadata, Menu, MenuBuilder, MenuEvent, MenuItemBuilder, SubmenuBuilder};
use tauri::{AppHandle, Emitter, Manager, Runtime};

/// The event the web UI receives a menu action by; its payload is the
/// action's id.
pub const MENU_ACTION_EVENT: &str = "menu-action";

/// What an app menu item asks the web UI to do. The ids are the action
/// names `App.run` takes (ui/src/menuActions.ts lists the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MenuAction {
    NewChat,
    ImportChat,
    ExportChat,
    Settings,
    Search,
    Stop,
    Regenerate,
    CopyLast,
    ToggleSidebar,
}

impl MenuAction {
    pub const ALL: [MenuAction; 9] = [
        MenuAction::NewChat,
        MenuAction::ImportChat,
        MenuAction::ExportChat,
        MenuAction::Settings,
        MenuAction::Search,
        MenuAction::Stop,
        MenuAction::Regenerate,
        MenuAction::CopyLast,
        MenuAction::ToggleSidebar,
    ];

    /// The menu item's id, and the name the web UI runs it by.
    pub fn id(self) -> &'static str {
        match self {
            MenuAction::NewChat => "new-chat",
            MenuAction::ImportChat => "import-chat",
            MenuAction::ExportChat => "export-chat",
            MenuAction::Settings => "settings",
            MenuAction::Search => "search",
            MenuAction::Stop => "stop",
            MenuAction::Regenerate => "regenerate",
            MenuAction::CopyLast => "copy-last",
            MenuAction::ToggleSidebar => "toggle-sidebar",
        }
    }

    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.id() == id)
    }

    /// The item's label in the menu.
    pub fn label(self) -> &'static str {
        match self {
            MenuAction::NewChat => "New Chat",
            MenuAction::ImportChat => "Import Chat…",
            MenuAction::ExportChat => "Export Chat",
            MenuAction::Settings => "Settings…",
            MenuAction::Search => "Search Chats",
            MenuAction::Stop => "Stop",
            MenuAction::Regenerate => "Regenerate",
            MenuAction::CopyLast => "Copy Last Answer",
            MenuAction::ToggleSidebar => "Toggle Sidebar",
        }
    }

    /// The item's shortcut (the keyboard shortcuts in ui/src/shortcuts.ts;
    /// Esc also stops, in the page, as a menu item has one shortcut).
    pub fn accelerator(self) -> Option<&'static str> {
        match self {
            MenuAction::NewChat => Some("CmdOrCtrl+N"),
            MenuAction::Settings => Some("CmdOrCtrl+,"),
            MenuAction::Search => Some("CmdOrCtrl+K"),
            MenuAction::Stop => Some("CmdOrCtrl+."),
            MenuAction::Regenerate => Some("CmdOrCtrl+R"),
            MenuAction::CopyLast => Some("CmdOrCtrl+Shift+C"),
            MenuAction::ToggleSidebar => Some("CmdOrCtrl+Shift+S"),
            MenuAction::ImportChat | MenuAction::ExportChat => None,
        }
    }
}

/// Quit on Linux, where GTK has no predefined Quit item.
pub const QUIT_ID: &str = "quit";

/// What a click on a menu item (by its id) does in the app.
#[derive(Debug, PartialEq, Eq)]
pub enum MenuRoute {
    /// An app action: the web UI runs it.
    Ui(MenuAction),
    Quit,
    /// A predefined item (copy, minimize…): the system did it already.
    System,
}

pub fn route(id: &str) -> MenuRoute {
    if id == QUIT_ID {
        return MenuRoute::Quit;
    }
    MenuAction::from_id(id).map_or(MenuRoute::System, MenuRoute::Ui)
}

/// The menu bar for this platform. The Mac and Linux layouts are chosen
/// with `cfg!`, not `#[cfg]`, so both are compiled (and type-checked) here.
pub fn build<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<Menu<R>> {
    let mac = cfg!(target_os = "macos");
    let item = |action: MenuAction| {
        let builder = MenuItemBuilder::with_id(action.id(), action.label());
        match action.accelerator() {
            Some(keys) => builder.accelerator(keys),
            None => builder,
        }
        .build(app)
    };
    let about = AboutMetadata {
        name: Some(app.package_info().name.clone()),
        version: Some(app.package_info().version.to_string()),
        comments: Some("Chat with vision-language models on this computer.".into()),
        // without it GTK's About shows a broken-image icon
        icon: app.default_window_icon().cloned(),
        ..Default::default()
    };

    let mut menu = MenuBuilder::new(app);
    if mac {
        // the first submenu is the App menu: macOS titles it with the app's name
        let app_menu = SubmenuBuilder::new(app, app.package_info().name.clone())
            .about(Some(about.clone()))
            .separator()
            .item(&item(MenuAction::Settings)?)
            .separator()
            .services()
            .separator()
            .hide()
            .hide_others()
            .show_all()
            .separator()
            .quit()
            .build()?;
        menu = menu.item(&app_menu);
    }

    let mut file = SubmenuBuilder::new(app, "File")
        .item(&item(MenuAction::NewChat)?)
        .separator()
        .item(&item(MenuAction::ImportChat)?)
        .item(&item(MenuAction::ExportChat)?);
    if !mac {
        file = file.separator().item(
            &MenuItemBuilder::with_id(QUIT_ID, "Quit").accelerator("CmdOrCtrl+Q").build(app)?,
        );
    }

    let mut edit = SubmenuBuilder::new(app, "Edit");
    if mac {
        edit = edit.undo().redo().separator();
    }
    edit = edit.cut().copy().paste().select_all();
    if !mac {
        edit = edit.separator().item(&item(MenuAction::Settings)?);
    }

    let chat = SubmenuBuilder::new(app, "Chat")
        .item(&item(MenuAction::Search)?)
        .separator()
        .item(&item(MenuAction::Stop)?)
        .item(&item(MenuAction::Regenerate)?)
        .item(&item(MenuAction::CopyLast)?)
        .separator()
        .item(&item(MenuAction::ToggleSidebar)?);
    menu = menu.item(&file.build()?).item(&edit.build()?).item(&chat.build()?);

    if mac {
        // this id makes it the Window menu macOS lists the open windows in
        let window = SubmenuBuilder::with_id(app, tauri::menu::WINDOW_SUBMENU_ID, "Window")
            .minimize()
            .maximize()
            .separator()
            .close_window()
            .build()?;
        menu = menu.item(&window);
    } else {
        menu = menu.item(&SubmenuBuilder::new(app, "Help").about(Some(about)).build()?);
    }
    menu.build()
}

/// A menu item was chosen: an app action goes to the web UI (the window
/// shown first: on a Mac it may be closed, which hides it), Quit quits.
pub fn on_menu_event<R: Runtime>(app: &AppHandle<R>, event: MenuEvent) {
    match route(event.id().as_ref()) {
        MenuRoute::Ui(action) => {
            if let Some(window) = app.get_webview_window("main") {
                let _ = window.show();
                let _ = window.set_focus();
            }
            if let Err(e) = app.emit_to("main", MENU_ACTION_EVENT, action.id()) {
                tracing::warn!("menu action {} did not reach the window: {e}", action.id());
            }
        }
        MenuRoute::Quit => app.exit(0),
        MenuRoute::System => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tauri::menu::MenuItemKind;

    #[test]
    fn every_action_id_routes_back_to_its_action() {
        for action in MenuAction::ALL {
            assert_eq!(route(action.id()), MenuRoute::Ui(action));
        }
        assert_eq!(route(QUIT_ID), MenuRoute::Quit);
        assert_eq!(route("copy"), MenuRoute::System);
        let mut ids: Vec<_> = MenuAction::ALL.iter().map(|a| a.id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), MenuAction::ALL.len(), "ids are unique");
    }

    /// The web UI knows every action the menu sends (one list on each side
    /// of the IPC; this keeps them the same).
    #[test]
    fn the_web_ui_lists_every_action() {
        let ui = include_str!("../../ui/src/menuActions.ts");
        for action in MenuAction::ALL {
            assert!(
                ui.contains(&format!("'{}'", action.id())),
                "ui/src/menuActions.ts lacks '{}'",
                action.id()
            );
        }
    }

    fn ids<R: Runtime>(items: Vec<MenuItemKind<R>>, out: &mut Vec<String>) {
        for item in items {
            match item {
                MenuItemKind::Submenu(s) => ids(s.items().unwrap(), out),
                MenuItemKind::MenuItem(i) => out.push(i.id().as_ref().to_string()),
                _ => {}
            }
        }
    }

    #[test]
    fn the_menu_bar_holds_every_action_once() {
        let app = tauri::test::mock_app();
        let menu = build(app.handle()).unwrap();
        let mut found = Vec::new();
        ids(menu.items().unwrap(), &mut found);
        for action in MenuAction::ALL {
            assert_eq!(found.iter().filter(|id| *id == action.id()).count(), 1, "{}", action.id());
        }
        // Linux has its own Quit item; a Mac the system's
        assert_eq!(found.iter().any(|id| id == QUIT_ID), cfg!(not(target_os = "macos")));
        assert_eq!(
            found.len(),
            MenuAction::ALL.len() + usize::from(cfg!(not(target_os = "macos")))
        );
    }
}
