"""Drives voicepipe's browser pages in a real Chromium (Debian's chromium + chromium-driver, selenium).

  browser_check.py talk BASE ROUTE WAV SHOTS [TOKEN]
      The talk page at BASE/?route=ROUTE&autostart=1 with Chromium's fake microphone playing WAV (looped):
      waits for four final transcripts, then opens the console in a second tab, picks the talk page's
      session and waits for frame counts on its edges. Screenshots of both go to SHOTS.
  browser_check.py console URL SHOTS NAME
      The console at URL (one running pipeline): waits for its graph and frame counts; screenshot NAME.
  browser_check.py page URL SHOTS NAME
      Loads URL and reports the page's text (a refused token shows the refusal); screenshot NAME.

Prints one JSON object on stdout.
"""
import json, os, sys, time
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException


def browser(wav=None):
    o = webdriver.ChromeOptions()
    o.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,860",
              "--autoplay-policy=no-user-gesture-required", "--use-fake-ui-for-media-stream", "--mute-audio"]:
        o.add_argument(a)
    if wav:
        o.add_argument("--use-fake-device-for-media-stream")
        o.add_argument("--use-file-for-fake-audio-capture=" + wav)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=o, service=service)


def texts(d, css):
    # Read in one script, not element by element: the page changes its lists live (the event list drops
    # its oldest entries), and an element read after it was removed is stale.
    return d.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => (e.innerText ?? e.textContent ?? '').trim())", css)


def wait(pred, timeout, step=0.25):
    """pred() until it is true or `timeout` passes. The pages redraw live, so an element read between
    a lookup and its redraw is stale: that reading counts as not yet, and is taken again."""
    def attempt():
        for _ in range(5):
            try:
                return pred()
            except StaleElementReferenceException:
                time.sleep(0.05)
        return None
    end = time.time() + timeout
    while time.time() < end:
        v = attempt()
        if v:
            return v
        time.sleep(step)
    return attempt()


def edge_counts(d):
    return [int(e.get_attribute("data-sent") or 0) for e in d.find_elements(By.CSS_SELECTOR, "text.edge-label[data-sent]")]


def console_result(d):
    for _ in range(10):
        try:
            return read_console(d)
        except StaleElementReferenceException:
            time.sleep(0.05)
    return read_console(d)


def click_first(d, selector):
    """Clicks the first element matching selector; the session list is redrawn as updates arrive, so an
    element found a moment ago may be gone: it is looked up again."""
    for _ in range(20):
        try:
            d.find_elements(By.CSS_SELECTOR, selector)[0].click()
            return
        except (StaleElementReferenceException, IndexError):
            time.sleep(0.05)
    d.find_elements(By.CSS_SELECTOR, selector)[0].click()


def read_console(d):
    return {"sessions": texts(d, "#sessions a"), "title": d.find_element(By.ID, "title").text,
            "nodes": [e.get_attribute("data-node") for e in d.find_elements(By.CSS_SELECTOR, "g.node")],
            "edge_sent": edge_counts(d),
            "edge_peak": peaks(d),
            "edge_labels": texts(d, "text.edge-label"),
            "status": d.find_element(By.ID, "status").text, "events": texts(d, "#events li")[:10]}


def logs(d):
    try:
        return [e["message"] for e in d.get_log("browser")][-20:]
    except Exception:
        return []


def talk(base, route, wav, shots, token=None):
    d = browser(wav)
    out = {}
    try:
        q = "?route=%s&autostart=1" % route + ("&token=" + token if token else "")
        d.get(base + "/" + q)
        wait(lambda: len(texts(d, "#finals li")) >= 4, 120)
        out["finals"] = texts(d, "#finals li")
        out["error"] = d.find_element(By.ID, "error").text
        out["state"] = d.find_element(By.ID, "state").text
        out["events"] = texts(d, "#events li")[:15]
        d.save_screenshot(os.path.join(shots, "talk-page.png"))
        talk_tab = d.current_window_handle
        d.switch_to.new_window("tab")
        d.get(base + "/console" + ("?token=" + token if token else ""))
        link = wait(lambda: d.find_elements(By.CSS_SELECTOR, "#sessions a"), 15)
        if link:
            click_first(d, "#sessions a")
            wait(lambda: any(n > 0 for n in edge_counts(d)) and len(d.find_elements(By.CSS_SELECTOR, "#events li")) > 0, 20)
            time.sleep(1.5)  # a few updates, so frames/s is shown
        out["console"] = console_result(d)
        d.save_screenshot(os.path.join(shots, "console.png"))
        d.switch_to.window(talk_tab)
        out["logs"] = logs(d)
    finally:
        d.quit()
    return out


def peaks(d):
    return [float(e.get_attribute("data-peak")) for e in d.find_elements(By.CSS_SELECTOR, "text.edge-label[data-peak]")]


def console(url, shots, name):
    d = browser()
    try:
        d.get(url)
        wait(lambda: any(n > 0 for n in edge_counts(d)), 30)
        loudest = [0.0]
        def heard():  # the level shown on audio edges, over a few updates (silence between sentences shows 0)
            try:
                loudest[0] = max([loudest[0]] + peaks(d))
            except StaleElementReferenceException:  # a label redrawn between lookup and read
                pass
            return loudest[0] > 0.01
        wait(heard, 15, step=0.1)
        time.sleep(1)
        out = console_result(d)
        out["edge_peak"] = [loudest[0]]
        d.save_screenshot(os.path.join(shots, name))
        out["logs"] = logs(d)
    finally:
        d.quit()
    return out


def page(url, shots, name):
    d = browser()
    try:
        d.get(url)
        time.sleep(0.5)
        out = {"text": d.find_element(By.TAG_NAME, "body").text, "title": d.title}
        d.save_screenshot(os.path.join(shots, name))
    finally:
        d.quit()
    return out


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    os.makedirs(args[3] if mode == "talk" else args[1], exist_ok=True)
    result = {"talk": lambda: talk(*args), "console": lambda: console(*args), "page": lambda: page(*args)}[mode]()
    print(json.dumps(result))
