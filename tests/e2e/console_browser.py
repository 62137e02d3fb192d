# Drives the web console in Debian's headless Chromium through Selenium (chromedriver at
# /usr/bin/chromedriver, never downloaded): a browser per scenario, waits on the page's own elements and
# data attributes, screenshots saved as test artefacts, JavaScript errors collected from the browser log.
import os
import time

from harness import CheckFailed, check

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 20


def open_browser(width=1280, height=800):
    """Headless Chromium at width x height; a missing browser or driver fails loudly (never a skip)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise CheckFailed("required browser tool missing: %s (scripts/install-deps.sh installs it)" % path)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=%d,%d" % (width, height), "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    browser = Browser(driver)
    browser.set_size(width, height)
    return browser


class Browser:
    def __init__(self, driver):
        self.driver = driver
        self.js_errors = []

    def quit(self):
        try:
            self.driver.quit()
        except Exception:  # noqa: BLE001 - a browser already gone is fine at the end
            pass

    def get(self, url):
        self.driver.get(url)

    def css(self, selector):
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def wait(self, what, predicate, timeout=WAIT_S):
        """Polls predicate() until it returns something truthy; its value, or CheckFailed naming `what`."""
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except Exception as e:  # noqa: BLE001 - stale elements while the page re-renders
                last_error = e
            time.sleep(0.2)
        self.collect_log()
        raise CheckFailed("timed out after %d s waiting for %s (last error: %s; page text: %r)"
                          % (timeout, what, last_error, self.text()[:600]))

    def wait_css(self, selector, what=None, timeout=WAIT_S):
        return self.wait(what or selector, lambda: self.css(selector), timeout)[0]

    def text(self):
        try:
            return self.driver.find_element("tag name", "body").text
        except Exception:  # noqa: BLE001
            return ""

    def run_js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def set_size(self, width, height):
        """Makes the page's viewport width x height (the window's outer size is a little larger)."""
        self.driver.set_window_size(width, height)
        inner_w, inner_h = self.run_js("return [window.innerWidth, window.innerHeight];")
        self.driver.set_window_size(2 * width - inner_w, 2 * height - inner_h)
        return self.run_js("return [window.innerWidth, window.innerHeight];")

    def screenshot(self, out_dir, name):
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, name)
        check(self.driver.save_screenshot(path), "screenshot %s not written" % path)
        check(os.path.getsize(path) > 2000, "screenshot %s is nearly empty" % path)
        return path

    def collect_log(self):
        """Uncaught exceptions and failed module loads from the browser console (kept in js_errors)."""
        try:
            entries = self.driver.get_log("browser")
        except Exception:  # noqa: BLE001
            return self.js_errors
        for e in entries:
            msg = e.get("message", "")
            if e.get("level") == "SEVERE" and ("Uncaught" in msg or "SyntaxError" in msg or "TypeError" in msg
                                                or "Refused" in msg):
                self.js_errors.append(msg)
        return self.js_errors

    def press(self, key):
        """A key press sent to whatever has the focus (as a user's keyboard does)."""
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(self.driver).send_keys(key).perform()

    def hover(self, element):
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(self.driver).move_to_element(element).perform()

    def click(self, element):
        self.run_js("arguments[0].scrollIntoView({block: 'center'});", element)
        element.click()

    def click_found(self, what, find):
        """Finds and clicks in one retried step: views that refresh replace their elements under us."""
        def attempt():
            self.click(find())
            return True
        self.wait(what, attempt)
