//! grub.cfg words: grub's shell-like quoting, turned into tokens.
//!
//! - Space and tab separate words; a newline or `;` ends a command; unquoted `{` and `}` are
//!   tokens of their own; `#` at the start of a word comments out the rest of the line.
//! - `'...'` is literal; `"..."` expands variables and lets `\` escape `"`, `\`, `$` and a newline;
//!   an unquoted `\` escapes the next character (`\` + newline continues the line).
//! - `$name`, `${name}`, `$1`, `$?`, `$#`, `$@`, `$*` are variable references, kept as parts of the
//!   word and expanded when the command runs; unquoted ones split on whitespace then.

/// A piece of a word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Lit(String),
    Var { name: String, quoted: bool },
}

/// One word: its parts, and whether any of it was quoted (a quoted empty word is kept).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Word {
    pub(crate) parts: Vec<Part>,
    pub(crate) quoted: bool,
}

impl Word {
    /// The word's text when it has no variables (keywords are matched this way).
    pub(crate) fn literal(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => s.push_str(l),
                Part::Var { .. } => return None,
            }
        }
        Some(s)
    }
    fn push_char(&mut self, c: char) {
        if let Some(Part::Lit(s)) = self.parts.last_mut() {
            s.push(c);
        } else {
            self.parts.push(Part::Lit(c.to_string()));
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Word(Word),
    /// Newline or `;`.
    End,
    LBrace,
    RBrace,
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    tokens: Vec<Token>,
    word: Option<Word>,
}

impl Lexer<'_> {
    fn word(&mut self) -> &mut Word {
        self.word.get_or_insert_with(Word::default)
    }
    fn finish_word(&mut self) {
        if let Some(w) = self.word.take() {
            self.tokens.push(Token::Word(w));
        }
    }
    fn var(&mut self, quoted: bool) {
        let mut name = String::new();
        match self.chars.peek().copied() {
            Some('{') => {
                self.chars.next();
                for c in self.chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                    name.push(c);
                }
            }
            Some(c @ ('?' | '#' | '@' | '*' | '0'..='9')) => {
                self.chars.next();
                name.push(c);
            }
            _ => {
                while let Some(&c) = self.chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        name.push(c);
                        self.chars.next();
                    } else {
                        break;
                    }
                }
            }
        }
        if name.is_empty() {
            self.word().push_char('$');
        } else {
            self.word().parts.push(Part::Var { name, quoted });
        }
    }
}

/// Splits grub.cfg text into tokens.
pub(crate) fn tokenize(text: &str) -> Vec<Token> {
    let mut lx = Lexer {
        chars: text.chars().peekable(),
        tokens: Vec::new(),
        word: None,
    };
    while let Some(c) = lx.chars.next() {
        match c {
            ' ' | '\t' | '\r' => lx.finish_word(),
            '\n' | ';' => {
                lx.finish_word();
                lx.tokens.push(Token::End);
            }
            '{' | '}' => {
                lx.finish_word();
                lx.tokens.push(if c == '{' {
                    Token::LBrace
                } else {
                    Token::RBrace
                });
            }
            '#' if lx.word.is_none() => {
                while lx.chars.peek().is_some_and(|&c| c != '\n') {
                    lx.chars.next();
                }
            }
            '\'' => {
                let w = lx.word();
                w.quoted = true;
                w.parts.push(Part::Lit(String::new()));
                while let Some(c) = lx.chars.next() {
                    if c == '\'' {
                        break;
                    }
                    lx.word().push_char(c);
                }
            }
            '"' => {
                let w = lx.word();
                w.quoted = true;
                w.parts.push(Part::Lit(String::new()));
                while let Some(c) = lx.chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match lx.chars.next() {
                            Some('\n') => {}
                            Some(n @ ('"' | '\\' | '$')) => lx.word().push_char(n),
                            Some(n) => {
                                lx.word().push_char('\\');
                                lx.word().push_char(n);
                            }
                            None => {}
                        },
                        '$' => lx.var(true),
                        c => lx.word().push_char(c),
                    }
                }
            }
            '\\' => match lx.chars.next() {
                Some('\n') | None => {}
                Some(n) => lx.word().push_char(n),
            },
            '$' => lx.var(false),
            c => lx.word().push_char(c),
        }
    }
    lx.finish_word();
    lx.tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Part {
        Part::Lit(s.into())
    }

    #[test]
    fn quoting() {
        let t = tokenize("menuentry 'A b' --id \"x$v\"y {\n  linux /v\\ z ${k} # c\n}\n");
        let words: Vec<&Word> = t
            .iter()
            .filter_map(|t| match t {
                Token::Word(w) => Some(w),
                _ => None,
            })
            .collect();
        assert_eq!(words[1].parts, vec![lit("A b")]);
        assert_eq!(
            words[3].parts,
            vec![
                lit("x"),
                Part::Var {
                    name: "v".into(),
                    quoted: true
                },
                lit("y")
            ]
        );
        assert_eq!(words[5].literal().as_deref(), Some("/v z"));
        assert_eq!(
            words[6].parts,
            vec![Part::Var {
                name: "k".into(),
                quoted: false
            }]
        );
        assert_eq!(words.len(), 7);
        assert!(t.contains(&Token::LBrace) && t.contains(&Token::RBrace));
    }
}
