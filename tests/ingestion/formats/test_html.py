from crag.ingestion.formats.html import html_text


def text(html: str) -> str:
    return html_text(html)[1]


def test_a_table_is_a_row_a_paragraph_each_spanning_cell_written_in_every_place_it_covers() -> None:
    page = ("<table><caption>Revenue</caption><tr><th>Year</th><th colspan='2'>Quarter and month</th></tr>"
            "<tr><th rowspan='2'>2025</th><td>Q1</td><td>March</td></tr>"
            "<tr><td colspan=2>Q2, April</td></tr><tr><td>2026</td><td>Q1</td><td>May</td></tr></table>")
    assert text(page).split("\n\n") == [
        "Revenue", "Year | Quarter and month | Quarter and month", "2025 | Q1 | March",
        "2025 | Q2, April | Q2, April", "2026 | Q1 | May"]


def test_a_cells_lines_and_an_empty_cell_keep_the_row_whole() -> None:
    page = ("<table><tr><td>Aythya<br><small>(Diving ducks)</small></td><td>&nbsp;</td><td><ul><li>Pond</li>"
            "<li>Marsh</li></ul></td></tr></table><p>After.</p>")
    assert text(page).split("\n\n") == ["Aythya (Diving ducks) |  | Pond Marsh", "After."]


def test_a_table_in_a_cell_is_read_inside_that_cell() -> None:
    page = ("<table><tr><td>Quack</td><td><table><tr><td>Short</td><td>quak</td></tr>"
            "<tr><td>Long</td><td>quaaak</td></tr></table></td></tr></table>")
    assert text(page) == "Quack | Short quak Long quaaak"


def test_an_ordered_lists_items_keep_their_numbers_as_the_list_writes_them() -> None:
    page = ("<ol><li>Close the valve</li><li>Drain the pump</li></ol>"
            "<ol start='42'><li>Forty-two</li><li value='7'>Seven</li><li>Eight</li></ol>"
            "<ol type='a'><li>First</li><li>Second<ul><li>Unnumbered</li></ul></li><li>Third</li></ol>"
            "<ol type='I' start='4'><li>Four</li></ol><ul><li>Plain</li></ul>")
    assert text(page).split("\n\n") == [
        "1. Close the valve", "2. Drain the pump", "42. Forty-two", "7. Seven", "8. Eight",
        "a. First", "b. Second", "Unnumbered", "c. Third", "IV. Four", "Plain"]


def test_an_images_alt_text_is_read_where_it_stands() -> None:
    page = ('<p>Wiring <img src="w.png" alt="Wiring  diagram of the pump"> as built.</p>'
            '<a href="/"><img src="logo.png" alt=""></a><figure><img src="x.png" alt="Pump"><figcaption>Fig. 1</figcaption>'
            "</figure>")
    assert text(page).split("\n\n") == ["Wiring Wiring diagram of the pump as built.", "Pump", "Fig. 1"]
