//! Tool calls written as a Python list of calls with keyword arguments,
//! `[get_weather(city="Paris", days=3), get_time()]`: the literals Python
//! writes (strings in either quotes, numbers, `True`/`False`/`None`, lists,
//! tuples, dicts) become the JSON arguments object, in the order written.
use serde_json::{Map, Number, Value};

/// One call: the function's name and its arguments object.
pub type NamedCall = (String, Map<String, Value>);

/// The calls in `raw`, in order. The list's brackets are required (a bare
/// `f(x=1)` is no call: Llama 3.1's built-in tools look so).
pub fn parse(raw: &str) -> Result<Vec<NamedCall>, String> {
    let mut p = Parser { s: raw.as_bytes(), at: 0, text: raw };
    p.blank();
    p.expect(b'[')?;
    let mut calls = Vec::new();
    loop {
        p.blank();
        if p.eat(b']') {
            break;
        }
        if !calls.is_empty() {
            p.expect(b',')?;
            p.blank();
            if p.eat(b']') {
                break;
            }
        }
        calls.push(p.call()?);
    }
    p.blank();
    if p.at != p.s.len() {
        return Err(format!("text after the list of calls at byte {}", p.at));
    }
    if calls.is_empty() {
        return Err("the list of calls is empty".into());
    }
    Ok(calls)
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    text: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn blank(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected {:?} at byte {}", c as char, self.at))
        }
    }

    /// A name: letters, digits, `_`, and `.` or `-` inside (`tools.search`).
    fn name(&mut self) -> Result<String, String> {
        let start = self.at;
        if !self.peek().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') {
            return Err(format!("expected a name at byte {start}"));
        }
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || b"_.-".contains(&c)) {
            self.at += 1;
        }
        Ok(self.text[start..self.at].to_owned())
    }

    /// `name(key=value, ...)`.
    fn call(&mut self) -> Result<NamedCall, String> {
        let name = self.name()?;
        self.blank();
        self.expect(b'(')?;
        let mut args = Map::new();
        loop {
            self.blank();
            if self.eat(b')') {
                break;
            }
            if !args.is_empty() {
                self.expect(b',')?;
                self.blank();
                if self.eat(b')') {
                    break;
                }
            }
            let key = self.name()?;
            self.blank();
            self.expect(b'=')?;
            self.blank();
            let value = self.value()?;
            args.insert(key, value);
        }
        Ok((name, args))
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.string(q).map(Value::String),
            Some(b'[') => self.sequence(b']'),
            Some(b'(') => self.sequence(b')'),
            Some(b'{') => self.dict(),
            Some(c) if c == b'-' || c == b'+' || c == b'.' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_ascii_alphabetic() => {
                let word = self.name()?;
                match word.as_str() {
                    "True" | "true" => Ok(Value::Bool(true)),
                    "False" | "false" => Ok(Value::Bool(false)),
                    "None" | "null" => Ok(Value::Null),
                    other => Err(format!("{other:?} is not a literal")),
                }
            }
            _ => Err(format!("expected a value at byte {}", self.at)),
        }
    }

    /// A quoted string with Python's common escapes.
    fn string(&mut self, quote: u8) -> Result<String, String> {
        let start = self.at;
        self.at += 1;
        let mut out = String::new();
        let mut chars = self.text[self.at..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c as u32 == quote as u32 => {
                    self.at += i + 1;
                    return Ok(out);
                }
                '\\' => {
                    let Some((_, e)) = chars.next() else { break };
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '0' => out.push('\0'),
                        'u' => {
                            let hex: String =
                                (0..4).filter_map(|_| chars.next()).map(|(_, h)| h).collect();
                            let code = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| format!("bad \\u escape {hex:?}"))?;
                            out.push(code);
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        Err(format!("a string at byte {start} is not closed"))
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || b"+-.eE_".contains(&c)) {
            self.at += 1;
        }
        let text = self.text[start..self.at].replace('_', "");
        if let Ok(n) = text.parse::<i64>() {
            return Ok(Value::Number(n.into()));
        }
        text.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{text:?} is not a number"))
    }

    /// A list or tuple, as a JSON array.
    fn sequence(&mut self, close: u8) -> Result<Value, String> {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            self.blank();
            if self.eat(close) {
                return Ok(Value::Array(items));
            }
            if !items.is_empty() {
                self.expect(b',')?;
                self.blank();
                if self.eat(close) {
                    return Ok(Value::Array(items));
                }
            }
            items.push(self.value()?);
        }
    }

    /// A dict with string keys, as a JSON object.
    fn dict(&mut self) -> Result<Value, String> {
        self.at += 1;
        let mut map = Map::new();
        loop {
            self.blank();
            if self.eat(b'}') {
                return Ok(Value::Object(map));
            }
            if !map.is_empty() {
                self.expect(b',')?;
                self.blank();
                if self.eat(b'}') {
                    return Ok(Value::Object(map));
                }
            }
            let key = match self.peek() {
                Some(q @ (b'"' | b'\'')) => self.string(q)?,
                _ => return Err(format!("expected a string key at byte {}", self.at)),
            };
            self.blank();
            self.expect(b':')?;
            self.blank();
            let value = self.value()?;
            map.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(raw: &str) -> Vec<(String, Value)> {
        parse(raw).unwrap().into_iter().map(|(n, a)| (n, Value::Object(a))).collect()
    }

    #[test]
    fn literals_become_json() {
        assert_eq!(
            args(r#"[get_weather(city="Paris", days=3, metric=True, note=None)]"#),
            [(
                "get_weather".into(),
                json!({"city": "Paris", "days": 3, "metric": true, "note": null})
            )]
        );
        assert_eq!(
            args("[f(a='it\\'s', b=-1.5e3, c=[1, 'x', (2, 3)], d={'k': {\"n\": False}},)]"),
            [(
                "f".into(),
                json!({"a": "it's", "b": -1500.0, "c": [1, "x", [2, 3]], "d": {"k": {"n": false}}})
            )]
        );
        assert_eq!(
            args(" [ f() , tools.g-2(x = \"\\u00e9\\n\") ] "),
            [("f".into(), json!({})), ("tools.g-2".into(), json!({"x": "é\n"}))]
        );
        // Keys keep the order written.
        let (_, a) = parse("[f(z=1, a=2)]").unwrap().remove(0);
        assert_eq!(a.keys().collect::<Vec<_>>(), ["z", "a"]);
    }

    #[test]
    fn what_is_not_a_list_of_calls_is_refused() {
        for raw in [
            "",
            "[]",
            "f(x=1)",
            "[f(x=1)",
            "[f(x=)]",
            "[f(1)]",
            "[f(x=\"open)]",
            "[f(x=1)] and more",
            "[f(x=undefined)]",
            "[1]",
        ] {
            assert!(parse(raw).is_err(), "{raw:?} parsed");
        }
    }
}
