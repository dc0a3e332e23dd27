//! Rust source read as text by the lint's checks: its code with comments
//! and the contents of literals blanked, every character in its place.

/// `text`'s characters with its comments and the contents of its string
/// and character literals blanked (spaces; line ends kept), so that
/// positions and lines stay those of the text. The quotes stay.
pub fn code_only(text: &str) -> Vec<char> {
    let chars: Vec<char> = text.chars().collect();
    let mut code = chars.clone();
    let mut blank = |from: usize, to: usize| {
        for c in &mut code[from..to.min(chars.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        let next = chars.get(index + 1).copied();
        let after_word =
            index > 0 && (chars[index - 1].is_alphanumeric() || chars[index - 1] == '_');
        let raw_hashes = |start: usize| {
            let hashes = chars[start.min(chars.len())..]
                .iter()
                .take_while(|c| **c == '#')
                .count();
            (chars.get(start + hashes) == Some(&'"')).then_some(hashes)
        };
        let raw_start = match (c, next) {
            ('r', _) if !after_word => Some(index + 1),
            ('b', Some('r')) if !after_word => Some(index + 2),
            _ => None,
        };
        if c == '/' && next == Some('/') {
            let end = chars[index..]
                .iter()
                .position(|c| *c == '\n')
                .map_or(chars.len(), |offset| index + offset);
            blank(index, end);
            index = end;
        } else if c == '/' && next == Some('*') {
            let start = index;
            let mut depth = 0usize;
            while index < chars.len() {
                if chars[index] == '/' && chars.get(index + 1) == Some(&'*') {
                    depth += 1;
                    index += 2;
                } else if chars[index] == '*' && chars.get(index + 1) == Some(&'/') {
                    depth -= 1;
                    index += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    index += 1;
                }
            }
            blank(start, index);
        } else if let Some((start, hashes)) =
            raw_start.and_then(|start| raw_hashes(start).map(|hashes| (start, hashes)))
        {
            // A raw string: to its quote and as many hashes.
            let contents = start + hashes + 1;
            index = contents;
            while index < chars.len() {
                let closes = chars[index] == '"'
                    && chars[index + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|c| **c == '#')
                        .count()
                        == hashes;
                if closes {
                    break;
                }
                index += 1;
            }
            blank(contents, index);
            index += 1 + hashes;
        } else if c == '"' {
            let contents = index + 1;
            index = contents;
            while index < chars.len() && chars[index] != '"' {
                index += if chars[index] == '\\' { 2 } else { 1 };
            }
            blank(contents, index);
            index += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: to its closing quote.
            let contents = index + 1;
            index += 3;
            while index < chars.len() && chars[index] != '\'' {
                index += 1;
            }
            blank(contents, index);
            index += 1;
        } else if c == '\'' && chars.get(index + 2) == Some(&'\'') {
            blank(index + 1, index + 2);
            index += 3;
        } else {
            index += 1;
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_literals_are_blanked_in_place() {
        let text = "a // b\nc /* d /* e */ f */ g \"h \\\" i\" r#\"j \"k\"\"# 'l' '\\'' m<'n>";
        let code: String = code_only(text).into_iter().collect();
        assert_eq!(code.chars().count(), text.chars().count());
        let words: Vec<&str> = code.split_whitespace().collect();
        assert_eq!(
            words,
            [
                "a", "c", "g", "\"", "\"", "r#\"", "\"#", "'", "'", "'", "'", "m<'n>"
            ]
        );
    }
}
